//! The loop's settings, as the builder collects them and the machine reads them.

use crate::provider::{PromptCache, RequestSettings, RetryPolicy};

/// Settings of the loop (see the [`AgentBuilder`] setters).
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    pub(crate) model: Option<String>,
    pub(crate) max_tokens: u32,
    pub(crate) settings: RequestSettings,
    pub(crate) thinking_budget: Option<u32>,
    pub(crate) max_turns: u32,
    pub(crate) max_tool_failure_turns: u32,
    pub(crate) max_repeated_calls: u32,
    pub(crate) token_budget: Option<u64>,
    pub(crate) final_answer_at_max_turns: bool,
    pub(crate) max_continuations: u32,
    pub(crate) retry: RetryPolicy,
    pub(crate) event_content_limit: usize,
    pub(crate) early_read_only_tools: bool,
    pub(crate) prompt_cache: Option<PromptCache>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            model: None,
            max_tokens: 8192,
            settings: RequestSettings::default(),
            thinking_budget: None,
            max_turns: 50,
            max_tool_failure_turns: 3,
            max_repeated_calls: 3,
            token_budget: None,
            final_answer_at_max_turns: false,
            max_continuations: 0,
            retry: RetryPolicy::default(),
            event_content_limit: 4096,
            early_read_only_tools: true,
            prompt_cache: Some(PromptCache::default()),
        }
    }
}
