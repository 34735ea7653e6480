//! ContextManager costs: appending and counting turn by turn as the history grows (the per-turn
//! cost must stay flat), and the tiktoken encoder's construction cost and throughput.
//!
//! Run: `cargo bench -p agent-loop-benches --bench context` (add `-- --quick` for a fast pass).

use std::hint::black_box;
use std::time::Duration;

use agent_loop::context::{CharEstimateCounter, ContextConfig, TiktokenCounter, TokenCounter};
use agent_loop::{ContentBlock, ContextManager, Message, Role};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::json;

/// One agent turn: a request, a tool call, its output, an answer.
fn turn(t: usize) -> Vec<Message> {
    let id = format!("toolu_{t:06}");
    vec![
        Message::user(format!(
            "Step {t}: open the configuration file, check the retry settings and tell me whether \
             the backoff is exponential."
        )),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "I should read the config file first, then answer.".into(),
                    signature: "EqQBCkYIBxgCKkB3".into(),
                },
                ContentBlock::text("Let me read the configuration."),
                ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "read_file".into(),
                    input: json!({"path": "config/retry.toml", "max_bytes": 65536}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                id,
                "[retry]\nmax_attempts = 5\nbase_delay_ms = 200\nmultiplier = 2.0\njitter = true\n"
                    .repeat(8),
                false,
            )],
        },
        Message::assistant(
            "Yes: the delay starts at 200 ms and doubles on every attempt, with jitter, up to 5 \
             attempts.",
        ),
    ]
}

fn manager_with(turns: usize, tiktoken: bool) -> ContextManager {
    let mut cm = ContextManager::new(ContextConfig::for_model("claude-sonnet-4-5"))
        .with_system("You are a careful coding agent.");
    if !tiktoken {
        cm = cm.with_counter(CharEstimateCounter);
    }
    for t in 0..turns {
        for m in turn(t) {
            cm.push(m);
        }
    }
    cm
}

fn append_turn(c: &mut Criterion) {
    TiktokenCounter::warm_up();
    let mut group = c.benchmark_group("context/append_turn");
    group.measurement_time(Duration::from_secs(3));
    for (counter, tiktoken) in [("tiktoken", true), ("char_estimate", false)] {
        for history in [10usize, 100, 1_000] {
            let mut cm = manager_with(history, tiktoken);
            let next = turn(history);
            group.bench_function(format!("{counter}/after_{history}_turns"), |b| {
                b.iter_batched(
                    || next.clone(),
                    |messages| {
                        let len = cm.len();
                        for m in messages {
                            cm.push(m);
                        }
                        let n = black_box(cm.token_count());
                        let over = black_box(cm.needs_compaction());
                        cm.truncate(len);
                        (n, over)
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("context/build");
    group.sample_size(10);
    group.bench_function("1000_turns_from_empty", |b| {
        let turns: Vec<Vec<Message>> = (0..1_000).map(turn).collect();
        b.iter_batched(
            || turns.clone(),
            |turns| {
                let mut cm = ContextManager::new(ContextConfig::default());
                for t in turns {
                    for m in t {
                        cm.push(m);
                    }
                    black_box(cm.token_count());
                }
                cm
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

fn tiktoken(c: &mut Criterion) {
    let mut group = c.benchmark_group("tiktoken");
    group.sample_size(10);
    group.bench_function("o200k_construction", |b| {
        b.iter(|| black_box(tiktoken_rs::o200k_base().map(|_| ())))
    });
    group.finish();

    TiktokenCounter::warm_up();
    let counter = TiktokenCounter::new();
    let prose = "The agent reads the file, decides what to change, and writes a short patch. \
                 When a tool fails, the error goes back to the model as a result it can read, \
                 and the loop goes on until the model is done or the budget runs out. "
        .repeat(500);
    let code = include_str!("../../src/context/mod.rs").repeat(4);
    let cjk = "エージェントはファイルを読み、変更内容を決めて短いパッチを書きます。\
               工具失败时，错误会作为结果返回给模型，循环继续进行。"
        .repeat(1_000);
    let mut json_text = String::from("[");
    let mut i = 0;
    while json_text.len() < 1 << 20 {
        if i > 0 {
            json_text.push(',');
        }
        json_text.push_str(
            &json!({"id": i, "name": format!("item-{i}"), "tags": ["alpha", "beta"],
                    "price": 12.5 + i as f64, "in_stock": i % 3 == 0,
                    "description": "A widget of moderate size and reliable make."})
            .to_string(),
        );
        i += 1;
    }
    json_text.push(']');

    let mut group = c.benchmark_group("tiktoken/count");
    group.measurement_time(Duration::from_secs(3));
    for (name, text) in [
        ("prose", &prose),
        ("code", &code),
        ("cjk", &cjk),
        ("json_1mb", &json_text),
    ] {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(counter.count(black_box(text))))
        });
        eprintln!(
            "{name}: {} bytes, {} tokens ({:.2} bytes/token)",
            text.len(),
            counter.count(text),
            text.len() as f64 / counter.count(text) as f64
        );
    }
    group.finish();
}

/// Counting a message with a 3 MB JPEG: the crate reads the size from the header (decoding
/// at most 96 KiB of the base64), against the baseline of decoding the whole image first.
fn image_tokens(c: &mut Criterion) {
    use base64::Engine as _;
    // A JPEG whose size marker sits after 60 KiB of metadata (a camera's EXIF and thumbnail).
    let mut jpeg = vec![0xFF, 0xD8];
    jpeg.extend_from_slice(&[0xFF, 0xE1, 0xEA, 0x60]);
    jpeg.resize(jpeg.len() + 0xEA60 - 2, 0x11);
    jpeg.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08, 0x0B, 0xB8, 0x0F, 0xA0, 3]);
    jpeg.resize(3 * 1024 * 1024, 0x22);
    let image = agent_loop::media::Image::jpeg(&jpeg).expect("a valid JPEG header");
    assert_eq!(image.dimensions(), Some((4000, 3000)));
    let message = agent_loop::UserInput::text("What is this?")
        .image(image.clone())
        .into_message();
    let agent_loop::media::MediaSource::Base64 { data, .. } = image.source() else {
        unreachable!()
    };
    let config = ContextConfig::for_model("claude-sonnet-4-5");
    let mut group = c.benchmark_group("context/image_tokens");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("count_from_header", |b| {
        b.iter_batched(
            || {
                let cm = ContextManager::new(config.clone()).with_counter(CharEstimateCounter);
                (cm, message.clone())
            },
            |(mut cm, message)| {
                cm.push(black_box(message));
                black_box(cm.token_count())
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("baseline_decode_whole_image", |b| {
        b.iter(|| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(black_box(data))
                .expect("valid base64");
            black_box(agent_loop::media::image_dimensions(
                agent_loop::media::ImageFormat::Jpeg,
                &bytes,
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, append_turn, tiktoken, image_tokens);
criterion_main!(benches);
