//! Shared by the examples: picking a model (a real provider when a key is set, otherwise the
//! crate's loopback mock server playing a script) and rendering the event stream.
#![allow(dead_code)]

use std::io::Write;
use std::sync::Arc;

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::{AgentEvent, AnthropicClient, LlmClient, OpenAiClient, RunOutcome};

/// The model an example talks to. Keeps the mock server alive while it is used.
pub struct Model {
    pub client: Arc<dyn LlmClient>,
    pub description: String,
    _server: Option<MockServer>,
}

/// A real provider when `ANTHROPIC_API_KEY` or `OPENAI_API_KEY` is set (with optional
/// `OPENAI_BASE_URL` and `ANTHROPIC_MODEL` / `OPENAI_MODEL`), otherwise the loopback mock
/// server playing `script` through the real Anthropic client and HTTP stack.
pub async fn model(script: Vec<ScriptedResponse>) -> Model {
    if std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        match AnthropicClient::from_env() {
            Ok(client) => {
                let client = if std::env::var_os("ANTHROPIC_MODEL").is_none() {
                    client.model("claude-sonnet-4-5")
                } else {
                    client
                };
                let description = format!("Anthropic ({})", LlmClient::model(&client));
                return Model {
                    client: Arc::new(client),
                    description,
                    _server: None,
                };
            }
            Err(e) => eprintln!("ANTHROPIC_API_KEY is set but unusable: {e}"),
        }
    }
    if std::env::var_os("OPENAI_API_KEY").is_some() || std::env::var_os("OPENAI_BASE_URL").is_some()
    {
        match OpenAiClient::from_env() {
            Ok(client) => {
                let client = if std::env::var_os("OPENAI_MODEL").is_none() {
                    client.model("gpt-4o-mini")
                } else {
                    client
                };
                let description = format!("OpenAI-compatible ({})", LlmClient::model(&client));
                return Model {
                    client: Arc::new(client),
                    description,
                    _server: None,
                };
            }
            Err(e) => eprintln!("OPENAI_API_KEY is set but unusable: {e}"),
        }
    }
    let server = MockServer::start().await;
    for response in script {
        server.push(response);
    }
    let client = AnthropicClient::new("mock-key")
        .base_url(server.anthropic_base_url())
        .model("scripted");
    Model {
        client: Arc::new(client),
        description: format!(
            "the loopback mock server at {} playing a scripted scenario (set ANTHROPIC_API_KEY or OPENAI_API_KEY for a real model)",
            server.url()
        ),
        _server: Some(server),
    }
}

/// Prints an event the way a simple CLI would; returns the outcome at the end.
pub fn render(event: &AgentEvent) -> Option<RunOutcome> {
    let mut out = std::io::stdout();
    match event {
        AgentEvent::TurnStart { turn } => println!("\n── turn {turn} ──"),
        AgentEvent::TextDelta { text } => {
            print!("{text}");
            let _ = out.flush();
        }
        AgentEvent::ThinkingDelta { text } => {
            print!("\x1b[2m{text}\x1b[0m");
            let _ = out.flush();
        }
        AgentEvent::ToolCall { name, input, .. } => println!("\n→ {name}({input})"),
        AgentEvent::ToolProgress { message, .. } => println!("  … {message}"),
        AgentEvent::ToolResult {
            name,
            content,
            is_error,
            duration,
            ..
        } => {
            let mark = if *is_error { "✗" } else { "←" };
            println!("{mark} {name} [{duration:.1?}]: {content}");
        }
        AgentEvent::Retry {
            attempt,
            delay,
            error,
        } => println!("\n(retry {attempt} in {delay:?}: {error})"),
        AgentEvent::Compacted {
            tokens_before,
            tokens_after,
        } => {
            println!("\n(context compacted: {tokens_before} → {tokens_after} tokens)")
        }
        AgentEvent::TurnEnd { .. } => println!(),
        AgentEvent::Finished(outcome) => {
            println!(
                "\n── {} after {} turn(s); tokens: {} in, {} out ──",
                outcome.termination,
                outcome.turns,
                outcome.usage.total_input_tokens(),
                outcome.usage.output_tokens
            );
            return Some(outcome.clone());
        }
        _ => {}
    }
    None
}
