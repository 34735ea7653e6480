//! Shared by the examples: picking a model (a real provider when a key is set, otherwise the
//! crate's loopback mock server playing a script) and rendering the event stream.
#![allow(dead_code)]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agent_loop::testing::{MockServer, ScriptedResponse};
use agent_loop::{
    AgentEvent, AnthropicClient, BedrockClient, GeminiClient, LlmClient, OllamaClient,
    OpenAiClient, RequestSettings, RunOutcome,
};

/// The model an example talks to. Keeps the mock server alive while it is used.
pub struct Model {
    pub client: Arc<dyn LlmClient>,
    pub description: String,
    /// The request settings to run it with: for a model served on this machine (a loopback
    /// `OPENAI_BASE_URL` or `ANTHROPIC_BASE_URL`, such as `scripts/real-model-server`'s), the
    /// ones the guide recommends for a small local model (see [`local_settings`]); else none.
    pub settings: RequestSettings,
    _server: Option<MockServer>,
}

/// What the guide recommends for a small model on a local server
/// (docs/guide/providers.md#local-models-llamacpp): temperature 0 (the answer repeats, and a
/// 1.5B model wanders less), and a `max_tokens`, since one answer without it ran past 1,400
/// tokens, minutes at a CPU's few tokens a second.
pub fn local_settings() -> RequestSettings {
    RequestSettings::new().temperature(0.0).max_tokens(512)
}

/// How long a local server may take to process a prompt before its first token: on a CPU
/// that counts against the idle timeout (the guide's 600 s covers an 8k context).
const LOCAL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Whether the URL in `var` names this machine (127.0.0.1, ::1 or localhost).
fn is_local(var: &str) -> bool {
    let Ok(url) = std::env::var(var) else {
        return false;
    };
    let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(host, _)| host),
    };
    matches!(host, "127.0.0.1" | "::1" | "localhost") || host.starts_with("127.")
}

/// The wire format an example was asked to speak: a flag on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages, or OpenAI Chat Completions when only `OPENAI_API_KEY` is set.
    Default,
    /// `--responses` (or `OPENAI_WIRE_API=responses`): OpenAI Responses.
    Responses,
    /// `--gemini`: Gemini `streamGenerateContent`.
    Gemini,
    /// `--bedrock`: Amazon Bedrock Converse.
    Bedrock,
    /// `--ollama`: Ollama `/api/chat`.
    Ollama,
}

/// The flags the examples share, and the format each asks for.
const WIRE_FLAGS: [(&str, Wire); 4] = [
    ("--responses", Wire::Responses),
    ("--gemini", Wire::Gemini),
    ("--bedrock", Wire::Bedrock),
    ("--ollama", Wire::Ollama),
];

/// The wire format asked for (the last flag wins).
pub fn wire() -> Wire {
    let flagged = std::env::args()
        .filter_map(|a| WIRE_FLAGS.iter().find(|(f, _)| *f == a).map(|(_, w)| *w))
        .next_back();
    match flagged {
        Some(wire) => wire,
        None if std::env::var("OPENAI_WIRE_API").is_ok_and(|v| v.trim() == "responses") => {
            Wire::Responses
        }
        None => Wire::Default,
    }
}

/// Whether the OpenAI Responses API was asked for: a `--responses` argument, or
/// `OPENAI_WIRE_API=responses`.
pub fn wants_responses() -> bool {
    wire() == Wire::Responses
}

/// The program's arguments without the flags the examples share (`--responses`, `--gemini`,
/// `--bedrock`, `--ollama`).
pub fn args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !WIRE_FLAGS.iter().any(|(f, _)| f == a))
        .collect()
}

fn set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

fn real(client: impl LlmClient + 'static, api: &str) -> Model {
    let description = format!("{api} ({})", LlmClient::model(&client));
    Model {
        client: Arc::new(client),
        description,
        settings: RequestSettings::new(),
        _server: None,
    }
}

/// A model on a local server: the guide's settings, said in the description.
fn local(client: impl LlmClient + 'static, api: &str) -> Model {
    let mut model = real(client, api);
    model.settings = local_settings();
    model.description.push_str(
        " on this machine: temperature 0, max_tokens 512, idle timeout 600 s, as the guide \
         recommends for a small local model",
    );
    model
}

/// The real service of a `--gemini`, `--bedrock` or `--ollama` run when its usual
/// environment variables are set: `GEMINI_API_KEY` (or `GOOGLE_API_KEY`); `AWS_REGION` with
/// `AWS_BEARER_TOKEN_BEDROCK` or `AWS_ACCESS_KEY_ID`; `OLLAMA_HOST`.
fn real_for(wire: Wire) -> Option<Model> {
    match wire {
        Wire::Gemini if set("GEMINI_API_KEY") || set("GOOGLE_API_KEY") => {
            match GeminiClient::from_env() {
                Ok(client) if set("GEMINI_MODEL") => Some(real(client, "Gemini")),
                Ok(client) => Some(real(client.model("gemini-2.5-flash"), "Gemini")),
                Err(e) => {
                    eprintln!("a Gemini key is set but unusable: {e}");
                    None
                }
            }
        }
        Wire::Bedrock if set("AWS_BEARER_TOKEN_BEDROCK") || set("AWS_ACCESS_KEY_ID") => {
            match BedrockClient::from_env() {
                Ok(client) if set("BEDROCK_MODEL") => Some(real(client, "Bedrock Converse")),
                Ok(client) => Some(real(
                    client.model("us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
                    "Bedrock Converse",
                )),
                Err(e) => {
                    eprintln!("AWS credentials are set but unusable: {e}");
                    None
                }
            }
        }
        Wire::Ollama if set("OLLAMA_HOST") => match OllamaClient::from_env() {
            Ok(client) if set("OLLAMA_MODEL") => Some(real(client, "Ollama")),
            Ok(client) => Some(real(client.model("qwen3"), "Ollama")),
            Err(e) => {
                eprintln!("OLLAMA_HOST is set but unusable: {e}");
                None
            }
        },
        _ => None,
    }
}

/// A real provider when its usual environment variables are set, otherwise the loopback mock
/// server playing `script` through the real client and HTTP stack of the asked [`wire`]
/// format. Without a flag: `ANTHROPIC_API_KEY`, else `OPENAI_API_KEY` / `OPENAI_BASE_URL`
/// (with optional `ANTHROPIC_MODEL` / `OPENAI_MODEL`), else the mock over Anthropic Messages.
/// `--responses` speaks OpenAI over the Responses API; `--gemini`, `--bedrock` and `--ollama`
/// speak those formats (see `real_for` for their variables).
pub async fn model(script: Vec<ScriptedResponse>) -> Model {
    let wire = wire();
    if let Some(model) = real_for(wire) {
        return model;
    }
    let responses = wire == Wire::Responses;
    if wire == Wire::Default && std::env::var_os("ANTHROPIC_API_KEY").is_some() {
        match AnthropicClient::from_env() {
            Ok(client) => {
                let client = if std::env::var_os("ANTHROPIC_MODEL").is_none() {
                    client.model("claude-sonnet-4-5")
                } else {
                    client
                };
                if is_local("ANTHROPIC_BASE_URL") {
                    return local(
                        client.idle_timeout(LOCAL_IDLE_TIMEOUT),
                        "Anthropic Messages",
                    );
                }
                return real(client, "Anthropic");
            }
            Err(e) => eprintln!("ANTHROPIC_API_KEY is set but unusable: {e}"),
        }
    }
    if matches!(wire, Wire::Default | Wire::Responses)
        && (std::env::var_os("OPENAI_API_KEY").is_some()
            || std::env::var_os("OPENAI_BASE_URL").is_some())
    {
        match OpenAiClient::from_env() {
            Ok(client) => {
                let client = match (std::env::var_os("OPENAI_MODEL"), responses) {
                    (None, false) => client.model("gpt-4o-mini"),
                    (None, true) => client.model("gpt-5-mini"),
                    (Some(_), _) => client,
                };
                let client = if responses {
                    client.responses().reasoning_summary("auto")
                } else {
                    client
                };
                let api = if client.is_responses() {
                    "OpenAI Responses"
                } else {
                    "OpenAI-compatible"
                };
                if is_local("OPENAI_BASE_URL") {
                    return local(client.idle_timeout(LOCAL_IDLE_TIMEOUT), api);
                }
                return real(client, api);
            }
            Err(e) => eprintln!("OPENAI_API_KEY is set but unusable: {e}"),
        }
    }
    let server = MockServer::start().await;
    for response in script {
        server.push(response);
    }
    let (client, api, keys): (Arc<dyn LlmClient>, &str, &str) = match wire {
        Wire::Responses => (
            Arc::new(
                OpenAiClient::new("")
                    .base_url(server.openai_base_url())
                    .model("scripted")
                    .responses(),
            ),
            "OpenAI Responses",
            "OPENAI_API_KEY",
        ),
        Wire::Gemini => (
            Arc::new(
                GeminiClient::new("mock-key")
                    .base_url(server.url())
                    .model("scripted"),
            ),
            "Gemini streamGenerateContent",
            "GEMINI_API_KEY",
        ),
        Wire::Bedrock => (
            Arc::new(
                BedrockClient::new("us-east-1")
                    .base_url(server.url())
                    .credentials("AKIDMOCK", "mock-secret", None)
                    .model("scripted"),
            ),
            "Bedrock Converse (AWS event stream)",
            "AWS_REGION and AWS credentials",
        ),
        Wire::Ollama => (
            Arc::new(OllamaClient::new().base_url(server.url()).model("scripted")),
            "Ollama /api/chat (NDJSON)",
            "OLLAMA_HOST",
        ),
        Wire::Default => (
            Arc::new(
                AnthropicClient::new("mock-key")
                    .base_url(server.anthropic_base_url())
                    .model("scripted"),
            ),
            "Anthropic Messages",
            "ANTHROPIC_API_KEY or OPENAI_API_KEY",
        ),
    };
    Model {
        client,
        description: format!(
            "the loopback mock server at {} playing a scripted scenario over {api} (set {keys} for a real model)",
            server.url()
        ),
        settings: RequestSettings::new(),
        _server: Some(server),
    }
}

/// Whether text or thinking of the current model attempt was printed by [`render`].
static PARTIAL: AtomicBool = AtomicBool::new(false);

/// Prints an event the way a simple CLI would; returns the outcome at the end. See
/// [`render_to`].
pub fn render(event: &AgentEvent) -> Option<RunOutcome> {
    let mut partial = PARTIAL.load(Ordering::Relaxed);
    let outcome = render_to(&mut std::io::stdout(), &mut partial, event);
    PARTIAL.store(partial, Ordering::Relaxed);
    outcome
}

/// Writes an event to `out` the way a simple CLI would; returns the outcome at the end.
/// `partial` says whether text of the current model attempt was written.
///
/// A `Retry` means the turn starts again and its partial text is dropped (as
/// `AgentEvent::Retry` says): text written cannot be taken back, so a line says that what
/// came before it is discarded, and the answer starts again on a line of its own.
pub fn render_to(
    out: &mut impl Write,
    partial: &mut bool,
    event: &AgentEvent,
) -> Option<RunOutcome> {
    // A CLI's output: a failed write (a closed pipe) is not the example's concern.
    let _ = write_event(out, partial, event);
    if let AgentEvent::Finished(outcome) = event {
        Some(outcome.clone())
    } else {
        None
    }
}

fn write_event(
    out: &mut impl Write,
    partial: &mut bool,
    event: &AgentEvent,
) -> std::io::Result<()> {
    match event {
        AgentEvent::TurnStart { turn } => {
            *partial = false;
            writeln!(out, "\n── turn {turn} ──")?;
        }
        AgentEvent::TextDelta { text } => {
            *partial = true;
            write!(out, "{text}")?;
            out.flush()?;
        }
        AgentEvent::ThinkingDelta { text } => {
            *partial = true;
            write!(out, "\x1b[2m{text}\x1b[0m")?;
            out.flush()?;
        }
        AgentEvent::ToolCall { name, input, .. } => writeln!(out, "\n→ {name}({input})")?,
        AgentEvent::ToolProgress { message, .. } => writeln!(out, "  … {message}")?,
        AgentEvent::ToolResult {
            name,
            content,
            is_error,
            duration,
            ..
        } => {
            let mark = if *is_error { "✗" } else { "←" };
            writeln!(out, "{mark} {name} [{duration:.1?}]: {content}")?;
        }
        AgentEvent::Retry {
            attempt,
            delay,
            error,
            ..
        } => {
            if std::mem::take(partial) {
                writeln!(
                    out,
                    "\n✗ [discarded: the answer above broke off; the turn starts again]"
                )?;
            }
            writeln!(out, "(retry {attempt} in {delay:?}: {error})")?;
        }
        // As after a retry, the turn's text so far is void.
        AgentEvent::Fallback { from, to, error } => {
            if std::mem::take(partial) {
                writeln!(
                    out,
                    "\n✗ [discarded: the answer above broke off; the turn starts again]"
                )?;
            }
            writeln!(out, "({from} failed: {error}; falling back to {to})")?;
        }
        AgentEvent::Handoff { from, to } => writeln!(out, "\n(handed from {from} to {to})")?,
        AgentEvent::Compacted {
            tokens_before,
            tokens_after,
        } => writeln!(
            out,
            "\n(context compacted: {tokens_before} → {tokens_after} tokens)"
        )?,
        AgentEvent::TurnEnd { .. } => writeln!(out)?,
        AgentEvent::Finished(outcome) => writeln!(
            out,
            "\n── {} after {} turn(s); tokens: {} in, {} out ──",
            outcome.termination,
            outcome.turns,
            outcome.usage.total_input_tokens(),
            outcome.usage.output_tokens
        )?,
        // A call shows once assembled (`ToolCall`); a sub-agent's work shows as its call's
        // result; the host's words are the host's own; rate limits are the provider's.
        AgentEvent::ToolCallStart { .. }
        | AgentEvent::ToolInputDelta { .. }
        | AgentEvent::SubAgent { .. }
        | AgentEvent::Steered { .. }
        | AgentEvent::RateLimits(_) => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the parallel_tools, repl and coding_agent examples.

/// Like [`model`], but the mock server plays [`MockResponse`]s, so a scripted scenario can
/// set HTTP-level behaviour such as a delay between chunks (a slowly streamed answer).
/// With an API key set, the real provider is used and `script` is ignored.
pub async fn model_with_responses(script: Vec<agent_loop::testing::MockResponse>) -> Model {
    let model = model(Vec::new()).await;
    if let Some(server) = &model._server {
        for response in script {
            server.push(response);
        }
    }
    model
}

/// Whether the model is the loopback mock server playing a script (no API key set).
pub fn is_scripted(model: &Model) -> bool {
    model._server.is_some()
}

/// The calculator tool of the examples: evaluates an arithmetic expression.
pub fn calculator_tool() -> impl agent_loop::Tool {
    /// The calculator's input.
    #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    #[schemars(crate = "agent_loop::tool::schemars")]
    struct CalcInput {
        /// An arithmetic expression with + - * / ^, parentheses and decimal numbers, e.g. "(2 + 3) * 4".
        expression: String,
    }
    agent_loop::tool::FnTool::new(
        "calculator",
        "Evaluates an arithmetic expression exactly as written and returns the number.",
        |input: CalcInput, _ctx| async move {
            eval_arithmetic(&input.expression)
                .map(format_number)
                .map_err(|e| {
                    agent_loop::ToolError::new(format!(
                        "cannot evaluate {:?}: {e}",
                        input.expression
                    ))
                })
        },
    )
    .read_only(true)
}

/// A number as a person writes it: integers without ".0", others to at most 6 decimals.
pub fn format_number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Fake weather for a city, and how long the fake weather service takes to answer it.
pub fn fake_weather(city: &str) -> (serde_json::Value, std::time::Duration) {
    let (temp_c, sky, latency_ms) = match city.trim().to_lowercase().as_str() {
        "paris" => (18, "light rain", 600),
        "tokyo" => (24, "sunny", 900),
        "london" => (14, "overcast", 500),
        "new york" => (21, "partly cloudy", 700),
        _ => (20, "clear", 400),
    };
    (
        serde_json::json!({ "city": city, "temperature_c": temp_c, "conditions": sky }),
        std::time::Duration::from_millis(latency_ms),
    )
}

/// The weather tool of the examples: fake data, read-only, with a simulated network delay
/// (`tokio::time::sleep`, so tests with a paused clock do not wait).
pub fn weather_tool() -> impl agent_loop::Tool {
    /// The weather tool's input.
    #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    #[schemars(crate = "agent_loop::tool::schemars")]
    struct WeatherInput {
        /// The city, e.g. "Paris".
        city: String,
    }
    agent_loop::tool::FnTool::new(
        "get_weather",
        "Returns the current weather (temperature in °C and conditions) for a city.",
        |input: WeatherInput, ctx: agent_loop::ToolContext| async move {
            if input.city.trim().is_empty() {
                return Err(agent_loop::ToolError::new(
                    "city is empty; pass a city name such as \"Paris\"",
                ));
            }
            let (report, latency) = fake_weather(&input.city);
            ctx.report_progress(format!("asking the weather service about {}", input.city));
            tokio::time::sleep(latency).await;
            Ok(report)
        },
    )
    .read_only(true)
}

/// Evaluates an arithmetic expression with + - * / ^, parentheses, unary minus and decimal
/// numbers (a small recursive-descent parser; the same grammar as the calculator example).
pub fn eval_arithmetic(expression: &str) -> Result<f64, String> {
    let mut p = ArithParser {
        s: expression.as_bytes(),
        i: 0,
    };
    let v = p.expr(0)?;
    p.skip_ws();
    if let Some(c) = p.s.get(p.i) {
        return Err(format!("unexpected {:?} at position {}", *c as char, p.i));
    }
    if !v.is_finite() {
        return Err("the result is not a finite number (division by zero?)".into());
    }
    Ok(v)
}

struct ArithParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl ArithParser<'_> {
    /// Nesting deeper than this is refused (the parser recurses).
    const MAX_DEPTH: u32 = 64;

    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expr(&mut self, depth: u32) -> Result<f64, String> {
        if depth > Self::MAX_DEPTH {
            return Err("the expression is nested too deeply".into());
        }
        let mut v = self.term(depth)?;
        loop {
            if self.eat(b'+') {
                v += self.term(depth)?;
            } else if self.eat(b'-') {
                v -= self.term(depth)?;
            } else {
                return Ok(v);
            }
        }
    }
    fn term(&mut self, depth: u32) -> Result<f64, String> {
        let mut v = self.power(depth)?;
        loop {
            if self.eat(b'*') {
                v *= self.power(depth)?;
            } else if self.eat(b'/') {
                v /= self.power(depth)?;
            } else {
                return Ok(v);
            }
        }
    }
    fn power(&mut self, depth: u32) -> Result<f64, String> {
        let base = self.unary(depth)?;
        if self.eat(b'^') {
            Ok(base.powf(self.power(depth + 1)?))
        } else {
            Ok(base)
        }
    }
    fn unary(&mut self, depth: u32) -> Result<f64, String> {
        if depth > Self::MAX_DEPTH {
            return Err("the expression is nested too deeply".into());
        }
        if self.eat(b'-') {
            return Ok(-self.unary(depth + 1)?);
        }
        if self.eat(b'(') {
            let v = self.expr(depth + 1)?;
            if !self.eat(b')') {
                return Err("missing ')'".into());
            }
            return Ok(v);
        }
        self.skip_ws();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_digit() || *c == b'.')
        {
            self.i += 1;
        }
        self.s
            .get(start..self.i)
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("expected a number at position {start}"))
    }
}
