//! Fallback models: where a run goes when its model fails in a chosen way. [`Fallback`] is
//! what the builder takes; [`FallbackTarget`] what the machine keeps of it; [`FallbackOn`]
//! the failures, and which of them move at once and which only after the retries.

use std::sync::Arc;

use crate::error::{transient_kind, LlmError, Transient};
use crate::provider::LlmClient;

/// A kind of failure that moves a run to a fallback model.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FallbackOn {
    /// The model is overloaded (HTTP 529 or 503, an in-stream `overloaded_error`): the run
    /// moves at once, without retrying the overloaded model.
    Overloaded,
    /// Rate limited or out of quota (HTTP 429, an in-stream rate-limit error): the run moves
    /// at once.
    RateLimited,
    /// A server error (another 5xx, an in-stream server error) or the server could not be
    /// reached (connection failures, timeouts, a stream cut short): the run moves once the
    /// retry policy's retries are spent.
    ServerError,
    /// The prompt is too long for the model's context window: the run moves at once (to a
    /// model with a larger window), instead of compacting the conversation.
    ContextOverflow,
}

impl FallbackOn {
    /// The kind of `error`, if it is one a fallback can be chosen for.
    pub fn of(error: &LlmError) -> Option<FallbackOn> {
        match error {
            LlmError::ContextOverflow(_) => Some(FallbackOn::ContextOverflow),
            LlmError::Api(api) => match api.status {
                503 | 529 => Some(FallbackOn::Overloaded),
                429 => Some(FallbackOn::RateLimited),
                500..=599 => Some(FallbackOn::ServerError),
                _ => None,
            },
            LlmError::Stream { error_type, .. } => {
                transient_kind(error_type).map(|kind| match kind {
                    Transient::Overloaded => FallbackOn::Overloaded,
                    Transient::RateLimited => FallbackOn::RateLimited,
                    Transient::Server => FallbackOn::ServerError,
                })
            }
            LlmError::Connect { .. }
            | LlmError::Timeout { .. }
            | LlmError::Incomplete { .. }
            | LlmError::Transport { .. } => Some(FallbackOn::ServerError),
            _ => None,
        }
    }

    /// Whether the run moves at the first such failure (else once its retries are spent).
    pub fn is_immediate(self) -> bool {
        !matches!(self, FallbackOn::ServerError)
    }
}

/// A model a run moves to when its model fails in one of the chosen ways
/// ([`AgentBuilder::fallback`](crate::AgentBuilder::fallback)): another model of the same
/// provider, or another provider. The conversation goes on with it for the rest of the run,
/// the history sent as the new provider's format wants it; the move is reported as
/// [`AgentEvent::Fallback`](crate::AgentEvent::Fallback). The next run starts with the
/// agent's own model again.
///
/// ```
/// use agent_loop::testing::ScriptedClient;
/// use agent_loop::{Agent};
/// use agent_loop::agent::{Fallback, FallbackOn};
///
/// let primary = ScriptedClient::new([]).with_model("claude-sonnet-4-5");
/// let backup = ScriptedClient::new([]).with_model("gpt-4.1");
/// let agent = Agent::builder(primary)
///     .fallback(Fallback::new(backup).on([FallbackOn::Overloaded, FallbackOn::ServerError]))
///     .build()?;
/// # Ok::<(), agent_loop::Error>(())
/// ```
#[derive(Clone)]
pub struct Fallback {
    pub(crate) client: Arc<dyn LlmClient>,
    pub(crate) target: FallbackTarget,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fallback")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Fallback {
    /// A fallback to `client`'s model, taken when the model is overloaded or fails with
    /// server errors past its retries (change it with [`on`](Self::on)).
    pub fn new(client: impl LlmClient + 'static) -> Fallback {
        let client: Arc<dyn LlmClient> = Arc::new(client);
        Fallback {
            target: FallbackTarget {
                model: None,
                client_model: client.model().to_owned(),
                on: vec![FallbackOn::Overloaded, FallbackOn::ServerError],
            },
            client,
        }
    }

    /// Asks `client` for this model (default: the client's own).
    pub fn model(mut self, model: impl Into<String>) -> Fallback {
        self.target.model = Some(model.into());
        self
    }

    /// The failures that move the run to this fallback.
    pub fn on(mut self, failures: impl IntoIterator<Item = FallbackOn>) -> Fallback {
        self.target.on = failures.into_iter().collect();
        self
    }
}

/// A fallback as the machine keeps it: the model it asks for, and when.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackTarget {
    /// The model asked for; `None` leaves it to the fallback's client.
    pub model: Option<String>,
    /// The model the fallback's client calls when `model` is `None`.
    pub client_model: String,
    /// The failures that move the run to it.
    pub on: Vec<FallbackOn>,
}

impl FallbackTarget {
    /// A target asking for `model` (or the client's, `client_model`) on these failures.
    pub fn new(model: Option<String>, client_model: String, on: Vec<FallbackOn>) -> Self {
        FallbackTarget {
            model,
            client_model,
            on,
        }
    }

    /// The model's name, for events.
    pub(crate) fn name(&self) -> &str {
        self.model.as_deref().unwrap_or(&self.client_model)
    }

    /// Whether `error` moves the run here: at once, or (`retries_spent`) once the retries
    /// are spent.
    pub(crate) fn takes(&self, error: &LlmError, retries_spent: bool) -> bool {
        FallbackOn::of(error)
            .is_some_and(|kind| self.on.contains(&kind) && (kind.is_immediate() || retries_spent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ApiError, TimeoutKind};

    fn api(status: u16) -> LlmError {
        LlmError::Api(Box::new(ApiError::new(status, "x")))
    }

    fn stream(error_type: &str) -> LlmError {
        LlmError::Stream {
            error_type: error_type.into(),
            message: "x".into(),
        }
    }

    #[test]
    fn failures_are_sorted_into_kinds() {
        use FallbackOn::*;
        assert_eq!(FallbackOn::of(&api(529)), Some(Overloaded));
        assert_eq!(FallbackOn::of(&api(503)), Some(Overloaded));
        assert_eq!(FallbackOn::of(&api(429)), Some(RateLimited));
        assert_eq!(FallbackOn::of(&api(500)), Some(ServerError));
        assert_eq!(FallbackOn::of(&api(502)), Some(ServerError));
        assert_eq!(FallbackOn::of(&api(599)), Some(ServerError));
        assert_eq!(FallbackOn::of(&api(400)), None);
        assert_eq!(FallbackOn::of(&api(401)), None);
        assert_eq!(FallbackOn::of(&api(600)), None);
        assert_eq!(
            FallbackOn::of(&LlmError::ContextOverflow(Box::new(ApiError::new(
                400, "long"
            )))),
            Some(ContextOverflow)
        );
        assert_eq!(
            FallbackOn::of(&stream("overloaded_error")),
            Some(Overloaded)
        );
        assert_eq!(
            FallbackOn::of(&stream("rate_limit_error")),
            Some(RateLimited)
        );
        assert_eq!(FallbackOn::of(&stream("api_error")), Some(ServerError));
        assert_eq!(FallbackOn::of(&stream("invalid_request_error")), None);
        let timeout = LlmError::Timeout {
            kind: TimeoutKind::FirstByte,
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(FallbackOn::of(&timeout), Some(ServerError));
        assert_eq!(
            FallbackOn::of(&LlmError::incomplete("cut")),
            Some(ServerError)
        );
        assert_eq!(FallbackOn::of(&LlmError::malformed("bad")), None);
    }

    #[test]
    fn server_errors_move_only_once_the_retries_are_spent() {
        let target = FallbackTarget::new(
            None,
            "b".into(),
            vec![FallbackOn::Overloaded, FallbackOn::ServerError],
        );
        assert!(target.takes(&api(529), false));
        assert!(!target.takes(&api(500), false));
        assert!(target.takes(&api(500), true));
        // Not chosen: never.
        assert!(!target.takes(&api(429), true));
        assert!(!target.takes(&api(400), true));
        assert_eq!(target.name(), "b");
        let named = FallbackTarget::new(Some("m".into()), "b".into(), vec![]);
        assert_eq!(named.name(), "m");
        assert!(!named.takes(&api(529), true));
    }
}
