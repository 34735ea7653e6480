//! [`RequestSettings`]: the sampling and request settings an agent applies to every model
//! call (on the builder) or to one run (through [`RunOptions`](crate::agent::RunOptions)).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ConfigError, Error};
use crate::provider::cache::PromptCache;
use crate::provider::context_editing::{ContextEditing, ServerCompaction};
use crate::provider::{ModelRequest, ToolChoice};
use crate::tool::search::ToolSearch;

/// Every model knob in one place: the model, temperature, top-p, output length, stop
/// sequences, tool choice, parallel tool calls, an end-user id, extended thinking, prompt
/// caching, and provider-specific body fields. An agent takes them from
/// [`AgentBuilder::settings`](crate::AgentBuilder::settings), a run from
/// [`RunOptions::settings`](crate::agent::RunOptions::settings).
///
/// Every field is optional; a set field overrides the one below it (per-run settings over the
/// builder's, the builder's over the request defaults). Ranges are checked by
/// [`validate`](Self::validate), which [`AgentBuilder::build`](crate::AgentBuilder::build)
/// and each run call.
///
/// ```
/// use agent_loop::{RequestSettings};
/// use agent_loop::provider::ToolChoice;
///
/// let settings = RequestSettings::new()
///     .model("claude-sonnet-4-5")
///     .max_tokens(2_048)
///     .temperature(0.2)
///     .top_p(0.9)
///     .stop_sequences(["END"])
///     .tool_choice(ToolChoice::Any)
///     .parallel_tool_calls(false)
///     .user("user-1234")
///     .extra("top_k", serde_json::json!(40));
/// assert!(settings.validate().is_ok());
/// assert!(RequestSettings::new().temperature(3.0).validate().is_err());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestSettings {
    /// The model asked for; `None` leaves it to the client (its
    /// [`model`](crate::LlmClient::model)).
    pub model: Option<String>,
    /// Sampling temperature, 0.0 to 2.0 (Anthropic takes up to 1.0).
    pub temperature: Option<f32>,
    /// Nucleus sampling, above 0.0 and at most 1.0.
    pub top_p: Option<f32>,
    /// Most output tokens per response, at least 1.
    pub max_tokens: Option<u32>,
    /// Sequences that stop generation (each non-empty).
    pub stop_sequences: Option<Vec<String>>,
    /// Which tool the model must (or must not) call.
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one response.
    pub parallel_tool_calls: Option<bool>,
    /// An id for the end user (Anthropic `metadata.user_id`, OpenAI `user`).
    pub user: Option<String>,
    /// Extended thinking with this token budget (Anthropic `thinking`, Gemini
    /// `thinkingBudget`, Bedrock's Claude models); `None` leaves thinking off.
    pub thinking_budget: Option<u32>,
    /// Prompt-cache breakpoints (Anthropic `cache_control`); `None` keeps the default, which
    /// an agent sends on every request ([`PromptCache::default`]: the tools, the system prompt
    /// and the two latest user messages, five-minute TTL). [`PromptCache::off`] sends none.
    pub prompt_cache: Option<PromptCache>,
    /// Strict tools: Anthropic `"strict": true` and OpenAI strict function schemas (Chat
    /// Completions `function.strict`, Responses `strict`), for each tool whose schema can be
    /// made strict ([`strict_schema`](crate::provider::strict::strict_schema) normalises it
    /// and says why when it cannot); `None` leaves them off.
    pub strict_tools: Option<bool>,
    /// Tool search for large tool sets: with more tools than its threshold, requests carry a
    /// search tool and the tools used or found instead of every schema (see
    /// [`tool::search`](crate::tool::search)); `None` sends every tool.
    pub tool_search: Option<ToolSearch>,
    /// Anthropic context editing: the server clears old tool results and thinking, and the
    /// agent replays what it cleared on its own history (see
    /// [`context_editing`](crate::provider::context_editing)); the other formats ignore it
    /// and rely on local compaction. `None` asks for none.
    pub context_editing: Option<ContextEditing>,
    /// Server-side compaction: OpenAI Responses (`context_management`) and Anthropic
    /// (`compact_20260112`) compact on their side past a threshold, and the compaction item or
    /// block goes back in later requests (see
    /// [`ServerCompaction`]); the other formats ignore it and rely on local compaction.
    /// `None` asks for none.
    pub server_compaction: Option<ServerCompaction>,
    /// Provider-specific fields merged into the top level of the request body. A field the
    /// crate itself sends fails the request with an error naming it (see
    /// [`ModelRequest::extra`]). Later settings add to and replace keys of earlier ones.
    pub extra: Map<String, Value>,
}

impl RequestSettings {
    /// No settings: the defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the model, over the client's.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Turns on extended thinking with this token budget.
    pub fn thinking_budget(mut self, tokens: u32) -> Self {
        self.thinking_budget = Some(tokens);
        self
    }

    /// Sets where prompt-cache breakpoints go ([`PromptCache::off`]: nowhere).
    pub fn prompt_cache(mut self, cache: PromptCache) -> Self {
        self.prompt_cache = Some(cache);
        self
    }

    /// Sends tools strict where their schemas allow (see
    /// [`strict`](crate::provider::strict)).
    pub fn strict_tools(mut self, strict: bool) -> Self {
        self.strict_tools = Some(strict);
        self
    }

    /// Searches the tools instead of sending every one, above the search's threshold (see
    /// [`tool::search`](crate::tool::search)).
    pub fn tool_search(mut self, search: ToolSearch) -> Self {
        self.tool_search = Some(search);
        self
    }

    /// Asks Anthropic to edit the context on its side (see
    /// [`context_editing`](crate::provider::context_editing)).
    pub fn context_editing(mut self, editing: ContextEditing) -> Self {
        self.context_editing = Some(editing);
        self
    }

    /// Asks OpenAI Responses or Anthropic to compact on its side (see [`ServerCompaction`]).
    pub fn server_compaction(mut self, compaction: ServerCompaction) -> Self {
        self.server_compaction = Some(compaction);
        self
    }

    /// Sets the temperature.
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// Sets top-p.
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// Sets the most output tokens per response.
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the stop sequences.
    pub fn stop_sequences<S: Into<String>>(mut self, stops: impl IntoIterator<Item = S>) -> Self {
        self.stop_sequences = Some(stops.into_iter().map(Into::into).collect());
        self
    }

    /// Sets the tool choice.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Allows or forbids several tool calls in one response.
    pub fn parallel_tool_calls(mut self, parallel: bool) -> Self {
        self.parallel_tool_calls = Some(parallel);
        self
    }

    /// Sets the end-user id.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Adds a provider-specific body field.
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// Checks the ranges: temperature 0.0–2.0, top-p in (0.0, 1.0], max tokens ≥ 1, stop
    /// sequences non-empty, a named tool choice non-empty, a model name non-empty, at most
    /// four cache breakpoints, all numbers finite.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |setting, message: String| Err(ConfigError::setting(setting, message).into());
        if self.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return bad("model", "the model name is empty".to_owned());
        }
        if let Some(cache) = &self.prompt_cache {
            cache.validate()?;
        }
        if let Some(editing) = &self.context_editing {
            editing.validate()?;
        }
        if let Some(compaction) = &self.server_compaction {
            compaction.validate()?;
        }
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=2.0).contains(&t) {
                return bad(
                    "temperature",
                    format!("temperature must be between 0.0 and 2.0, not {t}"),
                );
            }
        }
        if let Some(p) = self.top_p {
            if !p.is_finite() || p <= 0.0 || p > 1.0 {
                return bad(
                    "top_p",
                    format!("top_p must be above 0.0 and at most 1.0, not {p}"),
                );
            }
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens", "max_tokens must be at least 1".to_owned());
        }
        if let Some(stops) = &self.stop_sequences {
            if stops.iter().any(String::is_empty) {
                return bad(
                    "stop_sequences",
                    "a stop sequence may not be empty".to_owned(),
                );
            }
        }
        if let Some(ToolChoice::Tool(name)) = &self.tool_choice {
            if name.is_empty() {
                return bad("tool_choice", "tool_choice names no tool".to_owned());
            }
        }
        Ok(())
    }

    /// These settings over `base`: each field set here replaces the base's; extra fields are
    /// merged, these winning.
    pub fn over(&self, base: &RequestSettings) -> RequestSettings {
        let mut extra = base.extra.clone();
        extra.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        RequestSettings {
            model: self.model.clone().or_else(|| base.model.clone()),
            thinking_budget: self.thinking_budget.or(base.thinking_budget),
            prompt_cache: self.prompt_cache.or(base.prompt_cache),
            strict_tools: self.strict_tools.or(base.strict_tools),
            tool_search: self.tool_search.or(base.tool_search),
            context_editing: self
                .context_editing
                .clone()
                .or_else(|| base.context_editing.clone()),
            server_compaction: self.server_compaction.or(base.server_compaction),
            temperature: self.temperature.or(base.temperature),
            top_p: self.top_p.or(base.top_p),
            max_tokens: self.max_tokens.or(base.max_tokens),
            stop_sequences: self
                .stop_sequences
                .clone()
                .or_else(|| base.stop_sequences.clone()),
            tool_choice: self
                .tool_choice
                .clone()
                .or_else(|| base.tool_choice.clone()),
            parallel_tool_calls: self.parallel_tool_calls.or(base.parallel_tool_calls),
            user: self.user.clone().or_else(|| base.user.clone()),
            extra,
        }
    }

    /// Writes the set fields into `request`.
    pub fn apply(&self, request: &mut ModelRequest) {
        if let Some(model) = &self.model {
            request.model = Some(model.clone());
        }
        if let Some(tokens) = self.thinking_budget {
            request.thinking_budget = Some(tokens);
        }
        if let Some(cache) = self.prompt_cache {
            request.prompt_cache = (cache.breakpoints() > 0).then_some(cache);
        }
        if let Some(strict) = self.strict_tools {
            request.strict_tools = strict;
        }
        if let Some(editing) = &self.context_editing {
            request.context_editing = (!editing.is_empty()).then(|| editing.clone());
        }
        if let Some(compaction) = self.server_compaction {
            request.server_compaction = Some(compaction);
        }
        if let Some(t) = self.temperature {
            request.temperature = Some(t);
        }
        if let Some(p) = self.top_p {
            request.top_p = Some(p);
        }
        if let Some(n) = self.max_tokens {
            request.max_tokens = n;
        }
        if let Some(stops) = &self.stop_sequences {
            request.stop_sequences = stops.clone();
        }
        if let Some(choice) = &self.tool_choice {
            request.tool_choice = choice.clone();
        }
        if let Some(parallel) = self.parallel_tool_calls {
            request.parallel_tool_calls = Some(parallel);
        }
        if let Some(user) = &self.user {
            request.user = Some(user.clone());
        }
        for (key, value) in &self.extra {
            request.extra.insert(key.clone(), value.clone());
        }
    }
}

/// Serializes an `f32` setting as the decimal it was written as (`0.1`, not the
/// `0.10000000149011612` its widening to JSON's `f64` gives when a request passes through a
/// `serde_json::Value`): the shortest decimal that reads back as the same `f32`.
pub(crate) fn decimal<S: serde::Serializer>(value: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => {
            let exact: f64 = v.to_string().parse().unwrap_or(f64::from(*v));
            s.serialize_some(&exact)
        }
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_settings_go_out_as_the_decimal_written() {
        #[derive(serde::Serialize)]
        struct Body {
            #[serde(serialize_with = "decimal")]
            t: Option<f32>,
        }
        // Through a Value (as the encoders build requests) and straight to text.
        for (v, text) in [(0.1f32, "0.1"), (0.3, "0.3"), (1.0, "1.0"), (0.7, "0.7")] {
            let value = serde_json::to_value(Body { t: Some(v) }).unwrap();
            assert_eq!(value["t"].to_string(), text);
            let direct = serde_json::to_string(&Body { t: Some(v) }).unwrap();
            assert_eq!(direct, format!("{{\"t\":{text}}}"));
        }
        assert_eq!(
            serde_json::to_string(&Body { t: None }).unwrap(),
            r#"{"t":null}"#
        );
    }
    use serde_json::json;

    #[test]
    fn validation_checks_every_range() {
        let ok = RequestSettings::new()
            .temperature(0.0)
            .top_p(1.0)
            .max_tokens(1);
        assert!(ok.validate().is_ok());
        assert!(RequestSettings::new().temperature(2.0).validate().is_ok());
        for bad in [
            RequestSettings::new().temperature(-0.1),
            RequestSettings::new().temperature(2.01),
            RequestSettings::new().temperature(f32::NAN),
            RequestSettings::new().top_p(0.0),
            RequestSettings::new().top_p(1.01),
            RequestSettings::new().top_p(f32::INFINITY),
            RequestSettings::new().max_tokens(0),
            RequestSettings::new().stop_sequences([""]),
            RequestSettings::new().tool_choice(ToolChoice::Tool(String::new())),
        ] {
            let err = bad.validate().unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{bad:?}");
        }
    }

    #[test]
    fn later_settings_win_field_by_field() {
        let base = RequestSettings::new()
            .temperature(0.5)
            .user("a")
            .extra("k", json!(1))
            .extra("j", json!(2));
        let run = RequestSettings::new().temperature(0.1).extra("k", json!(3));
        let both = run.over(&base);
        assert_eq!(both.temperature, Some(0.1));
        assert_eq!(both.user.as_deref(), Some("a"));
        assert_eq!(both.extra["k"], 3);
        assert_eq!(both.extra["j"], 2);
        let mut request = ModelRequest::default();
        both.apply(&mut request);
        assert_eq!(request.temperature, Some(0.1));
        assert_eq!(request.user.as_deref(), Some("a"));
        assert_eq!(request.max_tokens, 4096);
        RequestSettings::new()
            .max_tokens(7)
            .parallel_tool_calls(false)
            .tool_choice(ToolChoice::None)
            .stop_sequences(["x"])
            .top_p(0.5)
            .apply(&mut request);
        assert_eq!(request.max_tokens, 7);
        assert_eq!(request.parallel_tool_calls, Some(false));
        assert_eq!(request.tool_choice, ToolChoice::None);
        assert_eq!(request.stop_sequences, ["x"]);
        assert_eq!(request.top_p, Some(0.5));
        assert!(!request.strict_tools);
        let strict = RequestSettings::new().strict_tools(true);
        RequestSettings::new().over(&strict).apply(&mut request);
        assert!(request.strict_tools);
        RequestSettings::new()
            .strict_tools(false)
            .over(&strict)
            .apply(&mut request);
        assert!(!request.strict_tools);
    }

    #[test]
    fn the_model_thinking_and_cache_go_over_and_into_the_request() {
        let base = RequestSettings::new()
            .model("base-model")
            .thinking_budget(1_000)
            .prompt_cache(PromptCache::default().message_breakpoints(1));
        let run = RequestSettings::new().model("run-model");
        let both = run.over(&base);
        assert_eq!(both.model.as_deref(), Some("run-model"));
        assert_eq!(both.thinking_budget, Some(1_000));
        let mut request = ModelRequest::default();
        both.apply(&mut request);
        assert_eq!(request.model.as_deref(), Some("run-model"));
        assert_eq!(request.thinking_budget, Some(1_000));
        assert_eq!(request.prompt_cache.map(|c| c.breakpoints()), Some(3));
        // Unset fields leave the request's as they are; `off` sends no breakpoint.
        RequestSettings::new().apply(&mut request);
        assert_eq!(request.model.as_deref(), Some("run-model"));
        assert!(request.prompt_cache.is_some());
        RequestSettings::new()
            .prompt_cache(PromptCache::off())
            .apply(&mut request);
        assert_eq!(request.prompt_cache, None);
        // Round trip through JSON (a paused run keeps its settings).
        let text = serde_json::to_string(&both).unwrap();
        assert_eq!(
            serde_json::from_str::<RequestSettings>(&text).unwrap(),
            both
        );
        assert!(text.contains(r#""ttl":"5m""#), "{text}");
    }

    #[test]
    fn an_empty_model_and_too_many_breakpoints_are_refused() {
        for bad in [
            RequestSettings::new().model(" "),
            RequestSettings::new().prompt_cache(PromptCache::default().message_breakpoints(3)),
        ] {
            assert!(matches!(bad.validate(), Err(Error::Config(_))), "{bad:?}");
        }
        RequestSettings::new()
            .model("m")
            .prompt_cache(PromptCache::off())
            .validate()
            .unwrap();
    }
}
