//! Anthropic context editing: the server clears old tool results (`clear_tool_uses_20250919`)
//! and old thinking (`clear_thinking_20251015`) before the prompt reaches the model.
//!
//! Set with [`RequestSettings::context_editing`](crate::RequestSettings::context_editing).
//! The Anthropic encoder sends it as `context_management: {"edits": [...]}` (the thinking edit
//! first, as the API requires) with the beta header `anthropic-beta:
//! context-management-2025-06-27`; every other format ignores it, and the agent's local
//! compaction ([`ContextConfig`](crate::context::ContextConfig)) stays on for every format
//! as the fallback.
//!
//! The response reports what the server cleared (`context_management.applied_edits` in the
//! `message_delta` event); the decoder turns it into [`LlmEvent::ContextEdited`] (an entry it
//! cannot read is skipped, never an error), the assembler into
//! [`ModelResponse::context_edits`](crate::ModelResponse::context_edits), and the agent
//! replays the edits on its own history
//! ([`ContextManager::apply_context_edits`](crate::ContextManager::apply_context_edits))
//! before it anchors the token count on the response's usage: the oldest cleared tool
//! results get [`CLEARED_TOOL_RESULT`] as their content, so the history a session saves, the
//! token count, and what a fallback model of another format reads match what the server
//! showed the model.
//!
//! ```
//! use agent_loop::provider::context_editing::{ClearToolUses, ContextEditing, Trigger};
//! use agent_loop::RequestSettings;
//!
//! let editing = ContextEditing::new().clear_tool_uses(
//!     ClearToolUses::new()
//!         .trigger(Trigger::InputTokens(30_000))
//!         .keep_tool_uses(3)
//!         .clear_at_least(5_000)
//!         .exclude_tools(["memory"]),
//! );
//! assert_eq!(
//!     editing.wire(),
//!     serde_json::json!({"edits": [{
//!         "type": "clear_tool_uses_20250919",
//!         "trigger": {"type": "input_tokens", "value": 30000},
//!         "keep": {"type": "tool_uses", "value": 3},
//!         "clear_at_least": {"type": "input_tokens", "value": 5000},
//!         "exclude_tools": ["memory"],
//!     }]})
//! );
//! let settings = RequestSettings::new().context_editing(editing);
//! assert!(settings.validate().is_ok());
//! ```
//!
//! [`LlmEvent::ContextEdited`]: crate::LlmEvent::ContextEdited

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::{ConfigError, Error};
pub use crate::wire::AppliedEdit;
use crate::wire::MAX_APPLIED_EDITS;

/// The `anthropic-beta` value context editing needs.
pub const BETA: &str = "context-management-2025-06-27";

/// The `anthropic-beta` value Anthropic's server compaction (`compact_20260112`) needs.
pub const COMPACT_BETA: &str = "compact-2026-01-12";

/// The edit type of Anthropic's server compaction.
pub const COMPACT: &str = "compact_20260112";

/// Anthropic's `context_management` for a request and the beta headers it needs: the
/// context edits, then server compaction (`compact_20260112` with its trigger); `None` when
/// neither is asked for.
pub(crate) fn anthropic(
    editing: Option<&ContextEditing>,
    compaction: Option<ServerCompaction>,
) -> Option<(Value, Vec<&'static str>)> {
    let editing = editing.filter(|e| !e.is_empty());
    if editing.is_none() && compaction.is_none() {
        return None;
    }
    let mut betas = Vec::new();
    let mut wire = match editing {
        Some(editing) => {
            betas.push(BETA);
            editing.wire()
        }
        None => json!({"edits": []}),
    };
    if let Some(compaction) = compaction {
        betas.push(COMPACT_BETA);
        if let Some(edits) = wire.get_mut("edits").and_then(Value::as_array_mut) {
            edits.push(json!({"type": COMPACT,
                              "trigger": {"type": "input_tokens", "value": compaction.threshold}}));
        }
    }
    Some((wire, betas))
}

/// The note left on the first message where the turns a server compaction item stands for
/// were dropped ([`ContextManager::apply_server_compaction`](crate::ContextManager::apply_server_compaction)).
pub const SERVER_COMPACTED: &str =
    "[Earlier turns were compacted by the server; the compaction item that follows stands for them.]";

/// The content a cleared tool result gets in the local history. Anthropic does not document
/// the exact placeholder text its server puts in; this one says the same thing.
pub const CLEARED_TOOL_RESULT: &str = "[tool result cleared by context editing]";

/// The edit type of tool-result clearing.
pub const CLEAR_TOOL_USES: &str = "clear_tool_uses_20250919";
/// The edit type of thinking clearing.
pub const CLEAR_THINKING: &str = "clear_thinking_20251015";

/// Server-side compaction: OpenAI Responses `context_management: [{"type": "compaction",
/// "compact_threshold": n}]`. Past `threshold` rendered tokens the server compacts the
/// conversation into one opaque compaction item in its output, which the agent keeps in the
/// history ([`ContentBlock::Compaction`](crate::ContentBlock::Compaction)) and sends back in
/// later requests, as it does reasoning items. On Anthropic the same setting sends a
/// `compact_20260112` edit (trigger `input_tokens` at `threshold`, beta
/// `compact-2026-01-12`); the `compaction` block the server returns (its summary streamed in
/// `compaction_delta`s) is kept verbatim as [`ContentBlock::Other`](crate::ContentBlock::Other)
/// and sent back as it came. Either way the server reads the prompt from the latest item on,
/// so the agent drops the turns before it
/// ([`ContextManager::apply_server_compaction`](crate::ContextManager::apply_server_compaction)):
/// the first message stays, with [`SERVER_COMPACTED`], Anthropic's readable summary and the
/// latest user input, which is what a fallback model of another format (whose encoder leaves
/// the item out) reads of them. Every other format ignores the setting. Set the local compaction threshold
/// ([`ContextConfig`](crate::context::ContextConfig)) above `threshold`, so the server
/// compacts first.
///
/// ```
/// use agent_loop::provider::context_editing::ServerCompaction;
/// use agent_loop::RequestSettings;
///
/// let settings = RequestSettings::new().server_compaction(ServerCompaction::new(150_000));
/// assert!(settings.validate().is_ok());
/// assert!(RequestSettings::new()
///     .server_compaction(ServerCompaction::new(0))
///     .validate()
///     .is_err());
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerCompaction {
    /// The rendered tokens past which the server compacts (`compact_threshold`), at least 1.
    pub threshold: u32,
}

impl ServerCompaction {
    /// Compaction past `threshold` tokens.
    pub fn new(threshold: u32) -> Self {
        ServerCompaction { threshold }
    }

    /// Checks the threshold is at least 1.
    pub fn validate(&self) -> Result<(), Error> {
        if self.threshold == 0 {
            return Err(ConfigError::setting(
                "server_compaction",
                "the compaction threshold must be at least 1".to_owned(),
            )
            .into());
        }
        Ok(())
    }
}

/// Which server-side edits to ask for. Empty (the default) sends nothing.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextEditing {
    /// Tool-result clearing (`clear_tool_uses_20250919`).
    pub clear_tool_uses: Option<ClearToolUses>,
    /// Thinking clearing (`clear_thinking_20251015`): how much thinking to keep. The API
    /// takes it only with extended thinking on.
    pub clear_thinking: Option<KeepThinking>,
}

/// When tool-result clearing starts.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Once the prompt is past this many input tokens (the API's default: 100,000).
    InputTokens(u32),
    /// Once the prompt holds more than this many tool uses.
    ToolUses(u32),
}

/// How much thinking `clear_thinking_20251015` keeps.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepThinking {
    /// The thinking of the latest this-many assistant turns (at least 1).
    Turns(u32),
    /// All of it (keeps the cached prefix intact).
    All,
}

/// The settings of `clear_tool_uses_20250919`; each left `None` takes the API's default.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClearToolUses {
    /// When clearing starts (`trigger`).
    pub trigger: Option<Trigger>,
    /// How many of the latest tool uses stay (`keep`, the API's default 3).
    pub keep_tool_uses: Option<u32>,
    /// The fewest input tokens a clearing must free, or it is not done (`clear_at_least`).
    pub clear_at_least: Option<u32>,
    /// Tools whose uses are never cleared (`exclude_tools`).
    pub exclude_tools: Vec<String>,
    /// Whether the tool calls' inputs are cleared too (`clear_tool_inputs`).
    pub clear_tool_inputs: bool,
}

impl ClearToolUses {
    /// The API's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets when clearing starts.
    pub fn trigger(mut self, trigger: Trigger) -> Self {
        self.trigger = Some(trigger);
        self
    }

    /// Keeps the latest `n` tool uses.
    pub fn keep_tool_uses(mut self, n: u32) -> Self {
        self.keep_tool_uses = Some(n);
        self
    }

    /// Clears only when at least `tokens` input tokens go.
    pub fn clear_at_least(mut self, tokens: u32) -> Self {
        self.clear_at_least = Some(tokens);
        self
    }

    /// Never clears these tools' uses.
    pub fn exclude_tools<S: Into<String>>(mut self, tools: impl IntoIterator<Item = S>) -> Self {
        self.exclude_tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Clears the tool calls' inputs too.
    pub fn clear_tool_inputs(mut self, clear: bool) -> Self {
        self.clear_tool_inputs = clear;
        self
    }
}

impl ContextEditing {
    /// No edits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for tool-result clearing.
    pub fn clear_tool_uses(mut self, clear: ClearToolUses) -> Self {
        self.clear_tool_uses = Some(clear);
        self
    }

    /// Asks for thinking clearing.
    pub fn clear_thinking(mut self, keep: KeepThinking) -> Self {
        self.clear_thinking = Some(keep);
        self
    }

    /// Whether no edit is asked for (then nothing is sent).
    pub fn is_empty(&self) -> bool {
        self.clear_tool_uses.is_none() && self.clear_thinking.is_none()
    }

    /// Checks the numbers the API refuses: a trigger, a kept count or a `Turns` of thinking
    /// of 0, and empty tool names.
    pub fn validate(&self) -> Result<(), Error> {
        let bad =
            |message: &str| Err(ConfigError::setting("context_editing", message.to_owned()).into());
        if let Some(clear) = &self.clear_tool_uses {
            if matches!(
                clear.trigger,
                Some(Trigger::InputTokens(0) | Trigger::ToolUses(0))
            ) {
                return bad("the clearing trigger must be at least 1");
            }
            if clear.exclude_tools.iter().any(String::is_empty) {
                return bad("an excluded tool name is empty");
            }
        }
        if self.clear_thinking == Some(KeepThinking::Turns(0)) {
            return bad("thinking must be kept for at least 1 turn");
        }
        Ok(())
    }

    /// The `context_management` object Anthropic takes: `{"edits": [...]}`, the thinking edit
    /// first (the API requires it there).
    pub fn wire(&self) -> Value {
        let mut edits = Vec::new();
        if let Some(keep) = self.clear_thinking {
            let keep = match keep {
                KeepThinking::Turns(n) => json!({"type": "thinking_turns", "value": n}),
                KeepThinking::All => json!({"type": "all"}),
            };
            edits.push(json!({"type": CLEAR_THINKING, "keep": keep}));
        }
        if let Some(clear) = &self.clear_tool_uses {
            let mut edit = Map::new();
            edit.insert("type".into(), json!(CLEAR_TOOL_USES));
            match clear.trigger {
                Some(Trigger::InputTokens(n)) => {
                    edit.insert(
                        "trigger".into(),
                        json!({"type": "input_tokens", "value": n}),
                    );
                }
                Some(Trigger::ToolUses(n)) => {
                    edit.insert("trigger".into(), json!({"type": "tool_uses", "value": n}));
                }
                None => {}
            }
            if let Some(n) = clear.keep_tool_uses {
                edit.insert("keep".into(), json!({"type": "tool_uses", "value": n}));
            }
            if let Some(n) = clear.clear_at_least {
                edit.insert(
                    "clear_at_least".into(),
                    json!({"type": "input_tokens", "value": n}),
                );
            }
            if !clear.exclude_tools.is_empty() {
                edit.insert("exclude_tools".into(), json!(clear.exclude_tools));
            }
            if clear.clear_tool_inputs {
                edit.insert("clear_tool_inputs".into(), json!(true));
            }
            edits.push(Value::Object(edit));
        }
        json!({ "edits": edits })
    }
}

/// Reads `applied_edits` leniently: entries that are not objects with a string `type` are
/// skipped, missing or mistyped counts are 0, at most [`MAX_APPLIED_EDITS`] are kept.
pub(crate) fn read_applied(context_management: &Value) -> Vec<AppliedEdit> {
    let Some(edits) = context_management
        .get("applied_edits")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let count = |e: &Value, key: &str| e.get(key).and_then(Value::as_u64).unwrap_or(0);
    edits
        .iter()
        .filter_map(|e| {
            let kind = e.get("type")?.as_str()?;
            Some(AppliedEdit {
                kind: kind.chars().take(64).collect(),
                cleared_tool_uses: u32::try_from(count(e, "cleared_tool_uses")).unwrap_or(u32::MAX),
                cleared_thinking_turns: u32::try_from(count(e, "cleared_thinking_turns"))
                    .unwrap_or(u32::MAX),
                cleared_input_tokens: count(e, "cleared_input_tokens"),
            })
        })
        .take(MAX_APPLIED_EDITS)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_thinking_edit_goes_first_and_defaults_are_left_out() {
        let editing = ContextEditing::new()
            .clear_tool_uses(ClearToolUses::new().clear_tool_inputs(true))
            .clear_thinking(KeepThinking::All);
        assert_eq!(
            editing.wire(),
            json!({"edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "all"}},
                {"type": "clear_tool_uses_20250919", "clear_tool_inputs": true},
            ]})
        );
        assert!(ContextEditing::new().is_empty());
        for bad in [
            ContextEditing::new().clear_thinking(KeepThinking::Turns(0)),
            ContextEditing::new()
                .clear_tool_uses(ClearToolUses::new().trigger(Trigger::ToolUses(0))),
            ContextEditing::new().clear_tool_uses(ClearToolUses::new().exclude_tools([""])),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn applied_edits_are_read_leniently() {
        let read = read_applied(&json!({"applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 900},
            {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": "x"},
            {"no_type": 1},
            7,
        ]}));
        assert_eq!(
            read,
            [
                AppliedEdit::new(CLEAR_TOOL_USES)
                    .cleared_tool_uses(4)
                    .cleared_input_tokens(900),
                AppliedEdit::new(CLEAR_THINKING).cleared_thinking_turns(2),
            ]
        );
        assert!(read_applied(&json!({"applied_edits": "no"})).is_empty());
        assert!(read_applied(&json!(null)).is_empty());
    }

    proptest! {
        #[test]
        fn reading_any_json_never_panics_and_stays_bounded(text in ".{0,200}", n in 0usize..40) {
            let value = json!({"applied_edits": vec![json!({"type": text, "cleared_tool_uses": n}); n]});
            prop_assert!(read_applied(&value).len() <= MAX_APPLIED_EDITS);
        }
    }
}
