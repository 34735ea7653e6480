//! Images in and out: a question about a picture, and a tool that answers with a second one.
//!
//! `cargo run --example vision` works with no API key: the loopback mock server plays a
//! scripted model over real HTTP. With `ANTHROPIC_API_KEY` (or `OPENAI_API_KEY`, optionally
//! with `OPENAI_BASE_URL` / `OPENAI_MODEL`) a real model looks at the images.
//!
//! Both pictures are drawn here, as real PNG files (stored, uncompressed deflate): a flag of
//! three vertical stripes, and a bar chart the `draw_chart` tool renders.

mod common;

use std::sync::Arc;

use agent_loop::agent::RunOptions;
use agent_loop::media::Image;
use agent_loop::testing::ScriptedResponse;
use agent_loop::tool::FnTool;
use agent_loop::{Agent, LlmClient, RunOutcome, ToolError, ToolOutput, UserInput};
use serde::Deserialize;
use serde_json::json;

/// The question the example asks.
pub const QUESTION: &str = "Which country's flag is this? Then draw a bar chart of the three \
                            stripe widths and tell me what it shows.";

/// What the mock model answers when no API key is set.
pub fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("Three vertical stripes: blue, white and red. Let me chart them.")
            .then_tool_call("call_1", "draw_chart", json!({"values": [1, 1, 1]}))
            .chunked(6),
        ScriptedResponse::text(
            "It is the flag of France. The chart shows three bars of equal height: the \
             stripes are equally wide.",
        )
        .chunked(6),
    ]
}

#[derive(Deserialize, agent_loop::tool::schemars::JsonSchema)]
#[schemars(crate = "agent_loop::tool::schemars")]
struct ChartInput {
    /// The heights of the bars, left to right (at most 16).
    values: Vec<u32>,
}

/// The agent with its chart tool.
pub fn build_agent(client: Arc<dyn LlmClient>) -> Result<Agent, agent_loop::Error> {
    let draw_chart = FnTool::new(
        "draw_chart",
        "Draws a bar chart of the values and returns it as an image.",
        |input: ChartInput, _ctx| async move {
            let png = bar_chart(&input.values);
            let image = Image::png(&png).map_err(|e| ToolError::new(e.to_string()))?;
            Ok::<_, ToolError>(ToolOutput::with_images(
                format!("a bar chart of {} values", input.values.len()),
                vec![image],
            ))
        },
    );
    Agent::builder(client)
        .system("You describe images precisely and briefly.")
        .tool(draw_chart)
        .max_turns(4)
        .build()
}

/// The question with the flag attached.
pub fn question() -> Result<UserInput, agent_loop::media::MediaError> {
    Ok(UserInput::text(QUESTION).image(Image::png(&flag())?))
}

pub async fn run(
    agent: &mut Agent,
    on_event: impl FnMut(&agent_loop::AgentEvent) + Send,
) -> Result<RunOutcome, agent_loop::Error> {
    Ok(agent
        .run_to_end_with(question()?, RunOptions::new(), on_event)
        .await)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = common::model(script()).await;
    println!("Model: {}", model.description);
    println!("You: {QUESTION} [+ a 96×64 PNG]");
    let mut agent = build_agent(model.client.clone())?;
    let outcome = run(&mut agent, |event| {
        common::render(event);
    })
    .await?;
    outcome.into_text()?;
    Ok(())
}

// ----- a tiny PNG writer: enough for the example's pictures --------------------------------

/// A 96×64 flag of three vertical stripes: blue, white, red.
pub fn flag() -> Vec<u8> {
    let (w, h) = (96, 64);
    png(w, h, |x, _| match x * 3 / w {
        0 => [0, 85, 164],
        1 => [255, 255, 255],
        _ => [239, 65, 53],
    })
}

/// A 128×64 bar chart of `values` (dark bars on white, scaled to the largest).
pub fn bar_chart(values: &[u32]) -> Vec<u8> {
    let values: Vec<u32> = values.iter().copied().take(16).collect();
    let max = values.iter().copied().max().unwrap_or(1).max(1);
    let (w, h) = (128u32, 64u32);
    let slot = w / (values.len().max(1) as u32);
    png(w, h, |x, y| {
        let i = (x / slot.max(1)) as usize;
        let height = values.get(i).map_or(0, |v| v * (h - 8) / max);
        let in_bar = x % slot > 2 && x % slot < slot.saturating_sub(2);
        if in_bar && h - y <= height {
            [40, 60, 120]
        } else {
            [255, 255, 255]
        }
    })
}

fn png(w: u32, h: u32, pixel: impl Fn(u32, u32) -> [u8; 3]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(((w * 3 + 1) * h) as usize);
    for y in 0..h {
        raw.push(0); // filter: none
        for x in 0..w {
            raw.extend_from_slice(&pixel(x, y));
        }
    }
    // zlib stream of stored (uncompressed) deflate blocks.
    let mut z = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        z.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&(!len).to_le_bytes());
        z.extend_from_slice(block);
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());

    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc_input = kind.to_vec();
    crc_input.extend_from_slice(data);
    out.extend_from_slice(&crc32(&crc_input).to_be_bytes());
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in bytes {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}
