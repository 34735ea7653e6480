//! Token counting, side by side: `tiktoken-rs` (what the crate uses, through
//! [`TiktokenCounter`]) against `bpe-openai` (GitHub's `bpe` crate family), both with the
//! `o200k_base` vocabulary, on the same texts: construction of each encoder, and tokens/s on
//! prose, code, CJK and a 1 MB JSON tool output. Before measuring, the bench checks that both
//! count the same tokens on every text and prints the counts.
//!
//! Run: `cargo bench -p agent-loop-benches --bench tokens`; results go to BENCHMARKS.md as ratios.

use std::hint::black_box;
use std::time::Duration;

use agent_loop::context::{TiktokenCounter, TokenCounter};
use criterion::{criterion_group, Criterion, Throughput};
use serde_json::json;

/// The texts of `benches/benches/context.rs`, built the same way so the figures compare.
fn texts() -> Vec<(&'static str, String)> {
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
    vec![
        ("prose", prose),
        ("code", code),
        ("cjk", cjk),
        ("json_1mb", json_text),
    ]
}

/// Environment variable that turns the bench binary into a one-shot construction timer.
const CONSTRUCT_ENV: &str = "AGENT_LOOP_BENCH_CONSTRUCT";

/// Both encoders are built once per process (tiktoken-rs by the crate's `LazyLock`, bpe-openai
/// by its own `LazyLock`, which has no public constructor to call again), so construction is
/// measured the way a host pays it: first use in a fresh process. The bench re-runs its own
/// binary with [`CONSTRUCT_ENV`] set, alternating the two encoders, and each child prints how
/// long its first use took. The in-process criterion figure for `tiktoken_rs::o200k_base()`
/// is in `benches/benches/context.rs` (`tiktoken/o200k_construction`).
fn construct_in_child(which: &str) -> Option<Duration> {
    let exe = std::env::current_exe().ok()?;
    let output = std::process::Command::new(exe)
        .env(CONSTRUCT_ENV, which)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let nanos: u64 = text.trim().parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// The child's side of [`construct_in_child`]: time first use, print nanoseconds, exit.
fn construct_here(which: &str) -> ! {
    let start = std::time::Instant::now();
    let n = match which {
        "tiktoken" => {
            TiktokenCounter::warm_up();
            TiktokenCounter::new().count("warm")
        }
        _ => bpe_openai::o200k_base().count("warm"),
    };
    let elapsed = start.elapsed();
    black_box(n);
    println!("{}", elapsed.as_nanos());
    std::process::exit(0)
}

fn construction(_c: &mut Criterion) {
    const RUNS: usize = 10;
    let mut tiktoken = Vec::new();
    let mut bpe = Vec::new();
    for _ in 0..RUNS {
        tiktoken.extend(construct_in_child("tiktoken"));
        bpe.extend(construct_in_child("bpe"));
    }
    tiktoken.sort();
    bpe.sort();
    let (Some(t), Some(b)) = (tiktoken.get(tiktoken.len() / 2), bpe.get(bpe.len() / 2)) else {
        eprintln!("tokens/construction: the child processes failed");
        return;
    };
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let spread = |v: &[Duration]| {
        format!(
            "min {:.1} ms, max {:.1} ms",
            ms(v.first().unwrap_or(&Duration::ZERO)),
            ms(v.last().unwrap_or(&Duration::ZERO))
        )
    };
    println!(
        "tokens/construction (first use in a fresh process, median of {RUNS}): \
         tiktoken-rs o200k {:.1} ms ({}); bpe-openai o200k {:.1} ms ({}); \
         bpe-openai/tiktoken-rs = {:.2}",
        ms(t),
        spread(&tiktoken),
        ms(b),
        spread(&bpe),
        b.as_secs_f64() / t.as_secs_f64()
    );
}

fn count(c: &mut Criterion) {
    TiktokenCounter::warm_up();
    let tiktoken = TiktokenCounter::new();
    let raw_tiktoken = tiktoken_rs::o200k_base().expect("o200k_base builds");
    let bpe = bpe_openai::o200k_base();
    let texts = texts();
    for (name, text) in &texts {
        let ours = tiktoken.count(text);
        let raw = raw_tiktoken.encode_ordinary(text).len();
        let theirs = bpe.count(text.as_str());
        eprintln!(
            "{name}: {} bytes; tokens: TiktokenCounter {ours}, tiktoken-rs one piece {raw}, \
             bpe-openai {theirs} ({})",
            text.len(),
            if raw == theirs {
                "identical"
            } else {
                "DIFFERENT"
            }
        );
        assert_eq!(raw, theirs, "{name}: tiktoken-rs and bpe-openai disagree");
    }

    let mut group = c.benchmark_group("tokens/count");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    for (name, text) in &texts {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{name}/tiktoken_counter"), |b| {
            b.iter(|| black_box(tiktoken.count(black_box(text))))
        });
        group.bench_function(format!("{name}/bpe_openai"), |b| {
            b.iter(|| black_box(bpe.count(black_box(text.as_str()))))
        });
    }
    group.finish();
}

criterion_group!(benches, construction, count);

fn main() {
    if let Ok(which) = std::env::var(CONSTRUCT_ENV) {
        construct_here(&which);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
