//! An interactive chat in the terminal: type a line, watch the answer stream in.
//!
//! ```text
//! cargo run --example repl                          # scripted mock model, no API key
//! ANTHROPIC_API_KEY=... cargo run --example repl    # a real model
//! printf 'hello\nweather?\n' | cargo run --example repl   # piped input works too
//! ```
//!
//! - Text is printed as it streams; tool calls and their results are shown as they happen;
//!   a spinner (on stderr, only when stdin and stderr are terminals) fills the wait for the
//!   first token; token usage is printed after each answer.
//! - Ctrl-C while an answer streams cancels that answer (the agent's
//!   [`AgentHandle::cancel`](agent_loop::agent::AgentHandle::cancel)) and returns to the prompt; the
//!   conversation stays valid. Ctrl-C at the prompt asks for a second one, which exits.
//!   `/exit`, `/quit` or end of input (Ctrl-D) exit too; `/clear` forgets the conversation.
//! - With no key, the loopback mock server plays three scripted answers, whatever you type:
//!   a greeting, a weather lookup with two tool calls, and a long story to interrupt.
//!
//! No line-editing crate: input is read line by line from stdin, so it also works piped.

mod common;

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::testing::{MockResponse, ScriptedResponse};
use agent_loop::{Agent, AgentEvent, LlmClient, Termination};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

/// What the mock model answers, in order, when no API key is set.
pub fn script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text(
            "Hello! I'm the scripted mock model of this example: I give three answers in \
             order, whatever you type. Ask me about the weather next.",
        )
        .usage_tokens(310, 34)
        .chunked(3),
        ScriptedResponse::text("Let me check both cities.")
            .then_tool_call("call_1", "get_weather", json!({"city": "Paris"}))
            .then_tool_call("call_2", "get_weather", json!({"city": "London"}))
            .usage_tokens(372, 58)
            .chunked(3),
        ScriptedResponse::text(
            "Paris has 18 °C and light rain; London 14 °C under an overcast sky. Next, ask me \
             for a story, and press Ctrl-C while it streams.",
        )
        .usage_tokens(461, 37)
        .chunked(3),
        ScriptedResponse::text(story())
            .usage_tokens(512, 420)
            .chunked(2),
    ]
}

fn story() -> String {
    "Once upon a time, in a data centre humming like a beehive, there lived a small agent \
     loop. Every morning it woke to a user message, thought for a while, streamed a few \
     words, called a tool or two, and waited for the results with the patience of a cat \
     watching a mouse hole. One day a result came back so long that the loop feared it would \
     burst; but it kept the head and the tail, dropped the middle with a polite marker, and \
     carried on. Another day the network sputtered mid-sentence; the loop counted to three, \
     with jitter, and asked again. And whenever someone pressed Ctrl-C, it stopped at once, \
     answered every open tool call as interrupted, and left the conversation tidy for the \
     next question. The end."
        .to_owned()
}

/// The REPL's agent: a chat assistant with the weather and calculator tools.
pub fn build_agent(client: Arc<dyn LlmClient>) -> Result<Agent, agent_loop::Error> {
    Agent::builder(client)
        .system(
            "You are a friendly assistant in a terminal chat. Answer concisely. Use the tools \
             for weather and arithmetic.",
        )
        .tool(common::weather_tool())
        .tool(common::calculator_tool())
        .max_turns(10)
        .build()
}

/// How the REPL talks to the terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplOptions {
    /// Print a prompt before reading (a terminal); otherwise echo each line read (piped).
    pub interactive: bool,
    /// Show a spinner on stderr while waiting for the first token.
    pub spinner: bool,
}

/// Runs the chat: reads lines from `lines` (closed = end of input), writes the transcript to
/// `out`, and treats each message on `interrupts` as a Ctrl-C. Returns at end of input,
/// `/exit`, or a second Ctrl-C at the prompt.
pub async fn repl(
    agent: &mut Agent,
    lines: &mut mpsc::Receiver<String>,
    interrupts: &mut mpsc::UnboundedReceiver<()>,
    out: &mut impl Write,
    opts: ReplOptions,
) -> std::io::Result<()> {
    // Whether the last thing the user did was a Ctrl-C: one more at the prompt exits.
    let mut interrupted = false;
    loop {
        if opts.interactive {
            write!(out, "\nyou> ")?;
            out.flush()?;
        }
        let line = tokio::select! {
            line = lines.recv() => line,
            Some(()) = interrupts.recv() => {
                if interrupted {
                    writeln!(out, "\nbye")?;
                    return Ok(());
                }
                interrupted = true;
                writeln!(out, "\n(press Ctrl-C again to exit, or type /exit)")?;
                continue;
            }
        };
        let Some(line) = line else {
            writeln!(out)?;
            return Ok(());
        };
        interrupted = false;
        let line = line.trim();
        if !opts.interactive {
            writeln!(out, "you> {line}")?;
        }
        match line {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/clear" => {
                match agent.clear() {
                    Ok(()) => writeln!(out, "(conversation cleared)")?,
                    Err(e) => writeln!(out, "(not cleared: {e})")?,
                }
                continue;
            }
            "/help" => {
                writeln!(
                    out,
                    "Type a message. Ctrl-C cancels an answer; /clear forgets the \
                     conversation; /exit, Ctrl-D or two Ctrl-C at the prompt exit."
                )?;
                continue;
            }
            _ => {}
        }
        interrupted = answer(agent, line, interrupts, out, opts).await?;
    }
}

/// Runs one message to the end (or until Ctrl-C); returns whether it was interrupted.
async fn answer(
    agent: &mut Agent,
    line: &str,
    interrupts: &mut mpsc::UnboundedReceiver<()>,
    out: &mut impl Write,
    opts: ReplOptions,
) -> std::io::Result<bool> {
    let handle = agent.handle();
    let mut events = agent.run(line);
    let mut spinner = Spinner::new(opts.spinner);
    spinner.start();
    let mut view = View::default();
    let mut cancelled = false;
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { break };
                match &event {
                    // Waiting for the model again (after tools): spin.
                    AgentEvent::TurnStart { .. } => spinner.start(),
                    // Still waiting for the model: the turn ended, starts again, or the
                    // response's head came (rate limits) with nothing to show yet.
                    AgentEvent::TurnEnd { .. }
                    | AgentEvent::Retry { .. }
                    | AgentEvent::Fallback { .. }
                    | AgentEvent::RateLimits(_) => {}
                    // The model or a tool said something.
                    AgentEvent::TextDelta { .. }
                    | AgentEvent::ThinkingDelta { .. }
                    | AgentEvent::ToolCallStart { .. }
                    | AgentEvent::ToolInputDelta { .. }
                    | AgentEvent::ToolCall { .. }
                    | AgentEvent::ToolProgress { .. }
                    | AgentEvent::ToolResult { .. }
                    | AgentEvent::Compacted { .. }
                    | AgentEvent::SubAgent { .. }
                    | AgentEvent::Handoff { .. }
                    | AgentEvent::Steered { .. }
                    | AgentEvent::Finished(_) => spinner.stop().await,
                }
                view.render(out, &event)?;
            }
            Some(()) = interrupts.recv() => {
                spinner.stop().await;
                if !cancelled {
                    cancelled = true;
                    handle.cancel();
                    view.line_break(out)?;
                    writeln!(out, "^C (cancelling this answer)")?;
                }
            }
        }
    }
    spinner.stop().await;
    Ok(cancelled)
}

/// Renders events compactly, tracking whether the cursor is at the start of a line.
#[derive(Debug)]
struct View {
    at_line_start: bool,
}

impl Default for View {
    fn default() -> Self {
        View {
            at_line_start: true,
        }
    }
}

impl View {
    fn line_break(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(out)?;
            self.at_line_start = true;
        }
        Ok(())
    }

    fn text(&mut self, out: &mut impl Write, text: &str) -> std::io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        write!(out, "{text}")?;
        out.flush()?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    fn render(&mut self, out: &mut impl Write, event: &AgentEvent) -> std::io::Result<()> {
        match event {
            AgentEvent::TextDelta { text } => self.text(out, text)?,
            AgentEvent::ThinkingDelta { text } => {
                self.text(out, &format!("\x1b[2m{text}\x1b[0m"))?
            }
            AgentEvent::ToolCall { name, input, .. } => {
                self.line_break(out)?;
                writeln!(out, "  → {name}({})", shorten(&input.to_string(), 200))?;
            }
            AgentEvent::ToolProgress { message, .. } => {
                self.line_break(out)?;
                writeln!(out, "  … {}", shorten(message, 200))?;
            }
            AgentEvent::ToolResult {
                name,
                content,
                is_error,
                duration,
                ..
            } => {
                self.line_break(out)?;
                let mark = if *is_error { "✗" } else { "←" };
                writeln!(
                    out,
                    "  {mark} {name} [{duration:.1?}]: {}",
                    shorten(content, 300)
                )?;
            }
            AgentEvent::Retry {
                attempt,
                delay,
                error,
                ..
            } => {
                self.line_break(out)?;
                writeln!(out, "  (retry {attempt} in {delay:.1?}: {error})")?;
            }
            AgentEvent::Fallback { from, to, error } => {
                self.line_break(out)?;
                writeln!(out, "  ({from} failed: {error}; falling back to {to})")?;
            }
            AgentEvent::Handoff { from, to } => {
                self.line_break(out)?;
                writeln!(out, "  (handed from {from} to {to})")?;
            }
            AgentEvent::Compacted {
                tokens_before,
                tokens_after,
            } => {
                self.line_break(out)?;
                writeln!(
                    out,
                    "  (context compacted: {tokens_before} → {tokens_after} tokens)"
                )?;
            }
            AgentEvent::TurnEnd { .. } => self.line_break(out)?,
            AgentEvent::Finished(outcome) => {
                self.line_break(out)?;
                let how = match &outcome.termination {
                    Termination::Completed => String::new(),
                    other => format!("{other} · "),
                };
                writeln!(
                    out,
                    "[{how}{} turn(s) · {} in / {} out tokens · {:.0}% of input from cache]",
                    outcome.turns,
                    outcome.usage.total_input_tokens(),
                    outcome.usage.output_tokens,
                    outcome.cache_hit_ratio() * 100.0
                )?;
            }
            // A turn shows by its text; a call once assembled (`ToolCall`); a sub-agent's
            // work as its call's result; the REPL does not steer; rate limits are the
            // provider's.
            AgentEvent::TurnStart { .. }
            | AgentEvent::ToolCallStart { .. }
            | AgentEvent::ToolInputDelta { .. }
            | AgentEvent::SubAgent { .. }
            | AgentEvent::Steered { .. }
            | AgentEvent::RateLimits(_) => {}
        }
        Ok(())
    }
}

/// The first line of `text`, cut to `max` characters.
fn shorten(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut short: String = first.chars().take(max).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

/// A one-line spinner on stderr while the model has not said anything yet.
struct Spinner {
    enabled: bool,
    running: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Spinner {
    fn new(enabled: bool) -> Self {
        Spinner {
            enabled,
            running: None,
        }
    }

    fn start(&mut self) {
        if !self.enabled || self.running.is_some() {
            return;
        }
        let (stop_tx, mut stop_rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
            let mut err = std::io::stderr();
            for frame in FRAMES.iter().cycle() {
                let _ = write!(err, "\r{frame} waiting for the model…");
                let _ = err.flush();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(80)) => {}
                    _ = &mut stop_rx => break,
                }
            }
            // Clear the spinner's line.
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        });
        self.running = Some((stop_tx, task));
    }

    /// Stops the spinner and waits until its line is cleared, so text never mixes with it.
    async fn stop(&mut self) {
        if let Some((stop, task)) = self.running.take() {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}

/// Reads stdin line by line on a plain thread (a blocked read there never holds up exit).
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Forwards every Ctrl-C to a channel, for the whole life of the program.
fn ctrl_c_events() -> mpsc::UnboundedReceiver<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    rx
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The mock streams slowly enough to watch (and to interrupt the story).
    let script = script()
        .into_iter()
        .map(|r| MockResponse::stream(r).chunk_delay(Duration::from_millis(35)))
        .collect();
    let model = common::model_with_responses(script).await;
    let interactive = std::io::stdin().is_terminal();
    let opts = ReplOptions {
        interactive,
        spinner: interactive && std::io::stderr().is_terminal(),
    };

    println!("Model: {}", model.description);
    if common::is_scripted(&model) {
        println!(
            "Scripted scenario: three answers, whatever you type. Try \"hello\", then \"what's \
             the weather in Paris and London?\", then \"tell me a story\" and press Ctrl-C while \
             it streams."
        );
    }
    println!("Ctrl-C cancels an answer; /exit, Ctrl-D or Ctrl-C twice at the prompt quits.");

    let mut agent = build_agent(model.client.clone())?;
    let mut lines = stdin_lines();
    let mut interrupts = ctrl_c_events();
    let mut stdout = std::io::stdout();
    repl(&mut agent, &mut lines, &mut interrupts, &mut stdout, opts).await?;
    stdout.flush()?;
    // The stdin thread may still be blocked in a read; exiting does not wait for it.
    std::process::exit(0)
}
