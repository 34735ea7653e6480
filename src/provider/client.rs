//! [`LlmClient`]: access to a model, and [`LlmStream`], the stream of one response.

use std::pin::Pin;

use futures::Stream;

use crate::error::LlmError;
use crate::provider::transport::RetryPolicy;
use crate::provider::{strict, ModelRequest};
use crate::wire::{LlmEvent, StreamLimits};

/// The stream of one model response: events, ending after [`LlmEvent::MessageStop`] or an error.
pub type LlmStream<'a> = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send + 'a>>;

/// Access to a model: streams one response for a request.
///
/// Implemented by [`AnthropicClient`](crate::AnthropicClient), [`OpenAiClient`](crate::OpenAiClient)
/// and the test clients; implement it for a custom provider or a recording/replaying client.
///
/// The returned stream is lazy: nothing is sent until it is first polled. It yields the
/// response's events as they arrive, ends after [`LlmEvent::MessageStop`], or yields one error
/// and ends. A client may retry a transient failure before any content arrived, as its
/// [`RetryPolicy`] (or the request's [`ModelRequest::retry`]) says; the stream then simply
/// goes on with the new attempt's events. Dropping the stream cancels the request and closes
/// the connection.
pub trait LlmClient: Send + Sync {
    /// Streams the response to `request`.
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a>;

    /// The model name the client sends when the request names none (used to look up the
    /// context window). Empty when unknown.
    fn model(&self) -> &str {
        ""
    }

    /// The limits on untrusted response data the client enforces; the agent assembles
    /// responses with the same limits (tool-argument and response sizes).
    fn stream_limits(&self) -> StreamLimits {
        StreamLimits::default()
    }

    /// The client's retry policy, if it retries: an agent built on the client adopts it
    /// (unless its builder sets one), and retries for the client instead (see
    /// [`ModelRequest::retry`]), so that one policy and one count govern a run's retries.
    fn retry_policy(&self) -> Option<RetryPolicy> {
        None
    }

    /// The provider, as OpenTelemetry's GenAI conventions name it (`gen_ai.provider.name`:
    /// `anthropic`, `openai` …), for the agent's spans. Empty when unknown (then left out).
    fn provider_name(&self) -> &str {
        ""
    }

    /// Whose strict-mode rules the client's tools follow when
    /// [`RequestSettings::strict_tools`](crate::RequestSettings::strict_tools) is on (see
    /// [`strict`]); `None` (the default) when its format has no strict tools. An agent checks
    /// its tools against it ([`Agent::strict_check`](crate::Agent::strict_check)).
    fn strict_dialect(&self) -> Option<strict::StrictDialect> {
        None
    }
}

/// `LlmClient` for a pointer to a client: each method the pointee's.
macro_rules! through_pointer {
    ($($pointer:ident)::+) => {
        impl<T: LlmClient + ?Sized> LlmClient for $($pointer)::+<T> {
            fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
                (**self).stream(request)
            }
            fn model(&self) -> &str {
                (**self).model()
            }
            fn stream_limits(&self) -> StreamLimits {
                (**self).stream_limits()
            }
            fn retry_policy(&self) -> Option<RetryPolicy> {
                (**self).retry_policy()
            }
            fn provider_name(&self) -> &str {
                (**self).provider_name()
            }
            fn strict_dialect(&self) -> Option<strict::StrictDialect> {
                (**self).strict_dialect()
            }
        }
    };
}

through_pointer!(std::sync::Arc);
through_pointer!(Box);
