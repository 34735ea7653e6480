//! The context budget: window size, output reserve, compaction water marks.

use crate::error::{ConfigError, Error};
use crate::media::ImageTokenRule;

/// The context budget of a [`ContextManager`](crate::ContextManager).
///
/// The *input budget* is the context window minus the tokens reserved for the response
/// (`max_tokens`). Compaction starts when the conversation passes `compaction_threshold` of the
/// input budget (the high-water mark, default 85%) and brings it down to `compaction_target`
/// (the low-water mark, default 40%): rarely, and a lot at a time, so that the requests in
/// between repeat each other's prefix and a provider's prompt cache serves them. With
/// `compaction_target` set to `None` ([`compact_to_threshold`](Self::compact_to_threshold)),
/// compaction brings the conversation just under the threshold, a little at almost every turn
/// once the window is full (the behaviour before the water marks).
///
/// ```
/// use agent_loop::context::ContextConfig;
///
/// let config = ContextConfig::for_model("claude-sonnet-4-5").output_reserve(8_000);
/// assert_eq!(config.context_window, 200_000);
/// assert_eq!(config.input_budget(), 192_000);
/// assert_eq!(config.threshold_tokens(), 163_200);
/// assert_eq!(config.target_tokens(), 76_800);
/// config.validate()?;
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub struct ContextConfig {
    /// The model's context window, in tokens (prompt plus response).
    pub context_window: u32,
    /// Tokens kept free for the response; set it to the request's `max_tokens`.
    pub output_reserve: u32,
    /// Fraction of the input budget past which [`compact`](crate::ContextManager::compact)
    /// acts: the high-water mark (default 0.85).
    pub compaction_threshold: f32,
    /// Fraction of the input budget that [`compact`](crate::ContextManager::compact) brings the
    /// conversation down to: the low-water mark (default `Some(0.4)`), below the threshold.
    /// `None` compacts just under the threshold instead, with the strategies of old (which
    /// rewrite the start of the history and fire at almost every turn once the window is
    /// full).
    pub compaction_target: Option<f32>,
    /// Fraction of the input budget that
    /// [`compact_harder`](crate::ContextManager::compact_harder) aims for after the provider
    /// rejected a request as too long (default 0.6).
    pub reactive_target: f32,
    /// How many of the most recent turns keep their tool outputs and are never summarized
    /// (default 4). The current turn is always kept, even when this is 0.
    pub keep_recent_turns: u32,
    /// Longest tool output, in bytes, kept whole when compacting; longer outputs keep their
    /// head and tail around a marker (default 16 KiB).
    pub tool_output_cap: u32,
    /// How an image's tokens are estimated (default [`ImageTokenRule::Larger`];
    /// [`for_model`](Self::for_model) picks the provider's rule by model name).
    pub image_tokens: ImageTokenRule,
    /// Whether an agent's compaction may ask a model for a summary of the turns it drops
    /// (default `true`; the agent's client writes it unless
    /// [`AgentBuilder::summarizer`](crate::AgentBuilder::summarizer) names another). With
    /// `false`, compaction never calls a model: it elides and drops old turns instead.
    pub summarize: bool,
}

impl Default for ContextConfig {
    /// A 128k-token window with 8k reserved for output.
    fn default() -> Self {
        ContextConfig {
            context_window: 128_000,
            output_reserve: 8_192,
            compaction_threshold: 0.85,
            compaction_target: Some(0.4),
            reactive_target: 0.6,
            keep_recent_turns: 4,
            tool_output_cap: 16 * 1024,
            image_tokens: ImageTokenRule::Larger,
            summarize: true,
        }
    }
}

/// Context windows and output reserves by model-name prefix; the first match wins, so longer
/// prefixes come before their shorter relatives.
const MODELS: &[(&str, u32, u32)] = &[
    // Anthropic: 200k for every current Claude model (1M is an opt-in beta; override it).
    ("claude-", 200_000, 16_384),
    // OpenAI.
    ("gpt-5", 400_000, 32_768),
    ("gpt-4.1", 1_047_576, 32_768),
    ("gpt-4o", 128_000, 16_384),
    ("gpt-4-turbo", 128_000, 4_096),
    ("gpt-4-32k", 32_768, 4_096),
    ("gpt-4", 8_192, 2_048),
    ("gpt-3.5-turbo", 16_385, 4_096),
    ("gpt-oss", 131_072, 16_384),
    ("o1-mini", 128_000, 16_384),
    ("o1", 200_000, 32_768),
    ("o3", 200_000, 32_768),
    ("o4", 200_000, 32_768),
    ("chatgpt-4o", 128_000, 16_384),
    // Google.
    ("gemini-", 1_048_576, 32_768),
    // Open-weight families, at the window their current releases support.
    ("llama-4", 1_000_000, 16_384),
    ("llama", 128_000, 8_192),
    ("qwen", 32_768, 8_192),
    ("deepseek", 128_000, 8_192),
    ("mistral", 128_000, 8_192),
    ("codestral", 256_000, 8_192),
    ("mixtral", 32_768, 4_096),
    ("gemma", 128_000, 8_192),
    ("phi", 128_000, 4_096),
];

impl ContextConfig {
    /// Defaults for a model, looked up by name prefix (case-insensitive, ignoring a routing
    /// prefix such as `anthropic/` or `openai/`): Claude 200k; GPT-5 400k; GPT-4.1 ~1M;
    /// GPT-4o 128k; o1/o3/o4 200k; Gemini 1M; Llama, DeepSeek, Mistral 128k; Qwen 32k;
    /// anything else 128k. Override any field with the setters.
    pub fn for_model(name: &str) -> Self {
        let lower = name.trim().to_ascii_lowercase();
        let base = lower.rsplit('/').next().unwrap_or(&lower);
        let mut config = ContextConfig::default();
        if let Some(&(_, window, reserve)) = MODELS.iter().find(|(p, _, _)| base.starts_with(p)) {
            config.context_window = window;
            config.output_reserve = reserve;
        }
        config.image_tokens = ImageTokenRule::for_model(base);
        config
    }

    /// Sets how image tokens are estimated.
    pub fn image_tokens(mut self, rule: ImageTokenRule) -> Self {
        self.image_tokens = rule;
        self
    }

    /// Sets whether compaction may ask a model for a summary (default `true`); `false`
    /// elides and drops old turns without a model call.
    ///
    /// ```
    /// use agent_loop::context::{ContextConfig, ContextManager};
    /// use agent_loop::testing::ScriptedClient;
    /// use agent_loop::Agent;
    ///
    /// let context = ContextManager::new(ContextConfig::for_model("gpt-4o").summarize(false));
    /// let agent = Agent::builder(ScriptedClient::new([])).context(context).build()?;
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn summarize(mut self, on: bool) -> Self {
        self.summarize = on;
        self
    }

    /// Sets the context window, in tokens.
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.context_window = tokens;
        self
    }

    /// Sets the tokens reserved for the response.
    pub fn output_reserve(mut self, tokens: u32) -> Self {
        self.output_reserve = tokens;
        self
    }

    /// Sets the fraction of the input budget past which compaction acts (clamped to 0.05..=1).
    pub fn compaction_threshold(mut self, fraction: f32) -> Self {
        self.compaction_threshold = clamp_fraction(fraction);
        self
    }

    /// Sets the low-water mark: the fraction of the input budget compaction brings the
    /// conversation down to (clamped to 0.05..=1; [`validate`](Self::validate) checks that it
    /// is below the threshold).
    pub fn compaction_target(mut self, fraction: f32) -> Self {
        self.compaction_target = Some(clamp_fraction(fraction));
        self
    }

    /// Turns the low-water mark off: compaction brings the conversation just under the
    /// threshold, with the strategies of old.
    pub fn compact_to_threshold(mut self) -> Self {
        self.compaction_target = None;
        self
    }

    /// Sets the fraction of the input budget that reactive compaction aims for (clamped to
    /// 0.05..=1).
    pub fn reactive_target(mut self, fraction: f32) -> Self {
        self.reactive_target = clamp_fraction(fraction);
        self
    }

    /// Sets how many recent turns keep their tool outputs and are never summarized.
    pub fn keep_recent_turns(mut self, turns: u32) -> Self {
        self.keep_recent_turns = turns;
        self
    }

    /// Sets the longest tool output, in bytes, kept whole when compacting.
    pub fn tool_output_cap(mut self, bytes: u32) -> Self {
        self.tool_output_cap = bytes;
        self
    }

    /// The tokens the prompt may use: the context window minus the output reserve.
    pub fn input_budget(&self) -> usize {
        self.context_window.saturating_sub(self.output_reserve) as usize
    }

    /// The token count past which [`compact`](crate::ContextManager::compact) acts.
    pub fn threshold_tokens(&self) -> usize {
        fraction_of(self.input_budget(), self.compaction_threshold)
    }

    /// The token count [`compact`](crate::ContextManager::compact) brings the conversation
    /// down to: the low-water mark, or the threshold when there is none (or when the mark is
    /// not below it).
    pub fn target_tokens(&self) -> usize {
        let threshold = self.threshold_tokens();
        match self.compaction_target {
            Some(target) => fraction_of(self.input_budget(), target).min(threshold),
            None => threshold,
        }
    }

    /// The token count [`compact_harder`](crate::ContextManager::compact_harder) aims for.
    pub fn reactive_tokens(&self) -> usize {
        fraction_of(self.input_budget(), self.reactive_target)
    }

    /// Checks the budget: a non-empty input budget, every fraction a number in (0, 1], and the
    /// low-water mark below the high-water mark. The setters clamp what they are given, but
    /// the fields are public; an agent builder calls this so a bad setting fails at
    /// construction with [`Error::Config`], not at the first compaction.
    pub fn validate(&self) -> Result<(), Error> {
        if self.input_budget() == 0 {
            return Err(ConfigError::setting(
                "output_reserve",
                format!(
                    "the output reserve ({} tokens) leaves no room for input in a context window \
                     of {} tokens",
                    self.output_reserve, self.context_window
                ),
            )
            .into());
        }
        let fractions = [
            ("compaction_threshold", Some(self.compaction_threshold)),
            ("compaction_target", self.compaction_target),
            ("reactive_target", Some(self.reactive_target)),
        ];
        for (name, value) in fractions {
            if let Some(v) = value {
                if !(v > 0.0 && v <= 1.0) {
                    return Err(ConfigError::setting(
                        name,
                        format!(
                            "{name} is {v}: it must be a fraction of the input budget in (0, 1]"
                        ),
                    )
                    .into());
                }
            }
        }
        if let Some(target) = self.compaction_target {
            if target >= self.compaction_threshold {
                return Err(ConfigError::setting(
                    "compaction_target",
                    format!(
                        "compaction_target ({target}) must be below compaction_threshold ({}): \
                         compaction starts above the threshold and ends at the target",
                        self.compaction_threshold
                    ),
                )
                .into());
            }
        }
        Ok(())
    }
}

fn clamp_fraction(fraction: f32) -> f32 {
    if fraction.is_nan() {
        return 0.85;
    }
    fraction.clamp(0.05, 1.0)
}

pub(crate) fn fraction_of(tokens: usize, fraction: f32) -> usize {
    let f = if fraction.is_finite() {
        f64::from(fraction).clamp(0.0, 1.0)
    } else {
        1.0
    };
    (tokens as f64 * f) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_bad_field() {
        let message = |c: ContextConfig| match c.validate() {
            Err(Error::Config(ConfigError::Setting { message, .. })) => message,
            other => panic!("{other:?}"),
        };
        ContextConfig::default().validate().unwrap();
        let mut c = ContextConfig {
            compaction_target: Some(0.85),
            ..ContextConfig::default()
        };
        assert!(message(c.clone()).contains("must be below compaction_threshold"));
        c.compaction_target = Some(f32::NAN);
        assert!(message(c.clone()).starts_with("compaction_target is NaN"));
        c.compaction_target = Some(0.0);
        assert!(message(c.clone()).starts_with("compaction_target is 0"));
        c.compaction_target = None;
        c.reactive_target = 1.5;
        assert!(message(c.clone()).starts_with("reactive_target is 1.5"));
        c.reactive_target = 0.6;
        c.compaction_threshold = -1.0;
        assert!(message(c).starts_with("compaction_threshold is -1"));
    }

    #[test]
    fn model_lookup_by_prefix() {
        let w = |m: &str| ContextConfig::for_model(m).context_window;
        assert_eq!(w("claude-opus-4-1-20250805"), 200_000);
        assert_eq!(w("anthropic/claude-3-5-haiku"), 200_000);
        assert_eq!(w("gpt-4o-mini"), 128_000);
        assert_eq!(w("gpt-4.1-nano"), 1_047_576);
        assert_eq!(w("gpt-4"), 8_192);
        assert_eq!(w("gpt-5-mini"), 400_000);
        assert_eq!(w("o1-mini"), 128_000);
        assert_eq!(w("o3-mini"), 200_000);
        assert_eq!(w("openai/o4-mini"), 200_000);
        assert_eq!(w("Llama-3.3-70B-Instruct"), 128_000);
        assert_eq!(w("qwen2.5-coder:32b"), 32_768);
        assert_eq!(w("deepseek-chat"), 128_000);
        assert_eq!(w("something-new"), 128_000);
        assert_eq!(w(""), 128_000);
    }

    #[test]
    fn budget_arithmetic() {
        let c = ContextConfig::default()
            .context_window(1_000)
            .output_reserve(200)
            .compaction_threshold(0.5)
            .compaction_target(0.6);
        assert_eq!(c.input_budget(), 800);
        assert_eq!(c.threshold_tokens(), 400);
        assert_eq!(c.reactive_tokens(), 480);
        assert_eq!(
            c.target_tokens(),
            400,
            "a target above the threshold: the threshold"
        );
        assert!(c.validate().is_err());
        let c = c.compaction_target(0.25);
        assert_eq!(c.target_tokens(), 200);
        c.validate().unwrap();
        assert_eq!(c.clone().compact_to_threshold().target_tokens(), 400);
        c.clone().compact_to_threshold().validate().unwrap();
        let c = c.output_reserve(5_000);
        assert_eq!(c.input_budget(), 0);
        assert!(c.validate().is_err());
        assert_eq!(
            ContextConfig::default()
                .compaction_threshold(f32::NAN)
                .compaction_threshold,
            0.85
        );
        assert_eq!(
            ContextConfig::default()
                .compaction_threshold(7.0)
                .compaction_threshold,
            1.0
        );
    }
}
