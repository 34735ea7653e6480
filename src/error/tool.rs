//! [`ToolError`]: a tool's own failure, with `?` conversions from the common error types.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// At most this many causes of a source are added to the text the model reads.
const MAX_CAUSES: usize = 8;

/// A tool's own failure; becomes an `is_error` tool result the model reads.
///
/// Build one with [`ToolError::new`] and a message that says what went wrong and what the
/// model can do about it, or let `?` convert an error: `String`, `&str`,
/// `Box<dyn Error + Send + Sync>` and the standard errors a tool meets (`std::io::Error`,
/// `serde_json::Error`, the `parse` errors, UTF-8 errors, `reqwest::Error`,
/// `tokio::task::JoinError`, `tokio::time::error::Elapsed` …) convert into a `ToolError`
/// whose message is the error's text and whose [`source`](StdError::source) is the error
/// itself. Any other error converts with [`ToolError::from_error`]; to use `?` on your own
/// error type, add a one-line `From` impl (the orphan rules allow it in your crate):
///
/// ```
/// use agent_loop::ToolError;
/// use std::error::Error as _;
///
/// #[derive(Debug)]
/// struct QuotaExceeded;
///
/// impl std::fmt::Display for QuotaExceeded {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("the search quota is used up; try again tomorrow")
///     }
/// }
///
/// impl std::error::Error for QuotaExceeded {}
///
/// impl From<QuotaExceeded> for ToolError {
///     fn from(e: QuotaExceeded) -> Self {
///         ToolError::from_error(e)
///     }
/// }
///
/// /// Your own check, with your own error type.
/// fn remaining_quota(used: u32) -> Result<u32, QuotaExceeded> {
///     100u32.checked_sub(used).filter(|left| *left > 0).ok_or(QuotaExceeded)
/// }
///
/// fn search(query: &str, used: &str) -> Result<String, ToolError> {
///     if query.is_empty() {
///         return Err("the query is empty; pass some words".into()); // &str
///     }
///     let used: u32 = used.parse()?; // std::num::ParseIntError
///     let left = remaining_quota(used)?; // QuotaExceeded, through the From impl above
///     Ok(format!("results for {query} ({left} searches left)"))
/// }
///
/// assert_eq!(search("rust", "1").unwrap(), "results for rust (99 searches left)");
/// assert_eq!(search("", "1").unwrap_err().message(), "the query is empty; pass some words");
/// assert_eq!(search("rust", "x").unwrap_err().message(), "invalid digit found in string");
/// let error = search("rust", "100").unwrap_err();
/// assert_eq!(error.message(), "the search quota is used up; try again tomorrow");
/// assert!(error.source().unwrap().is::<QuotaExceeded>());
/// ```
///
/// The model reads the message, followed by the causes of the source that the message does
/// not already contain (a `reqwest::Error` says "error sending request", its cause says why).
/// Errors are cheap to clone (the source is shared); two errors are equal when their
/// messages are.
///
/// A tool that cannot go on without a person's answer returns [`ToolError::ask`] instead: the
/// run pauses, and the tool is called again with the answer.
#[derive(Clone)]
pub struct ToolError {
    message: String,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
    /// What the tool asks, for an error made by [`ToolError::ask`].
    question: Option<Box<Question>>,
}

/// What a running tool asks the host before it can go on: a person's confirmation, a choice,
/// details the model did not give, a remote agent's question. Returned as
/// [`ToolError::ask`]; the run pauses, and the call is run again with the host's answer
/// ([`ToolContext::reply`](crate::ToolContext::reply)).
///
/// Plain data (serde): a [`PausedRun`](crate::PausedRun) keeps it, so `data` must hold all
/// the tool needs to go on in another process (a remote task's id, say), and nothing secret.
///
/// ```
/// use agent_loop::tool::Question;
/// use serde_json::json;
///
/// let question = Question::new("Which account should the refund go to?")
///     .schema(json!({"type": "object", "properties": {"account": {"type": "string"}}}))
///     .data(json!({"task_id": "t-42"}));
/// assert_eq!(question.prompt, "Which account should the refund go to?");
/// assert_eq!(question.data["task_id"], "t-42");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Question {
    /// What is asked, for a person to read.
    pub prompt: String,
    /// The JSON Schema of the answer expected, if any: the host answers with JSON text of
    /// that shape in a [`Resolution::Result`](crate::agent::Resolution::Result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// The tool's own state, handed back with the reply (`null` when none).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Question {
    /// A question with no answer schema and no data.
    pub fn new(prompt: impl Into<String>) -> Self {
        Question {
            prompt: prompt.into(),
            schema: None,
            data: serde_json::Value::Null,
        }
    }

    /// The JSON Schema of the answer expected.
    pub fn schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The tool's state, handed back with the reply.
    pub fn data(mut self, data: serde_json::Value) -> Self {
        self.data = data;
        self
    }
}

impl ToolError {
    /// A tool error with a message the model can act on.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            source: None,
            question: None,
        }
    }

    /// The call cannot go on without the host's answer to `question`: the call gets no result
    /// yet, and the run pauses once the rest of its batch is done, ending with
    /// [`Termination::Paused`](crate::Termination::Paused). Its
    /// [`PendingCall`](crate::agent::PendingCall) waits for
    /// [`WaitsFor::Answer`](crate::agent::WaitsFor::Answer) and carries the question.
    /// [`Agent::resume`](crate::Agent::resume) with any answer for the call (approve, deny, a
    /// result) runs the tool again, with the same input, and
    /// [`ToolContext::reply`](crate::ToolContext::reply) giving the question and the answer:
    /// the tool then returns its result, or asks again.
    ///
    /// A read-only tool started early (while the model still streams) cannot pause the run:
    /// its question becomes an error result. Run outside an agent
    /// ([`ToolRegistry::execute_batch`](crate::ToolRegistry::execute_batch)), the call's result is an
    /// error whose [`question`](crate::tool::ToolCallResult::question) is this one.
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::agent::{Resolution, Resolutions, WaitsFor};
    /// use agent_loop::tool::{FnTool, Question};
    /// use agent_loop::{Agent, AgentEvent, Termination, ToolContext, ToolError};
    /// use futures::StreamExt;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let refund = FnTool::new("refund", "Refunds an order.", |_: serde_json::Value, ctx: ToolContext| async move {
    ///     match ctx.reply().map(|r| &r.resolution) {
    ///         None => Err(ToolError::ask(Question::new("Refund to which account?"))),
    ///         Some(Resolution::Result { content, .. }) => Ok(format!("refunded to {content}")),
    ///         Some(_) => Err(ToolError::new("the refund was not confirmed")),
    ///     }
    /// });
    /// let model = ScriptedClient::new([
    ///     ScriptedResponse::tool_call("c1", "refund", json!({"order": 7})),
    ///     ScriptedResponse::text("Done."),
    /// ]);
    /// let mut agent = Agent::builder(model).tool(refund).build()?;
    /// let events: Vec<AgentEvent> = agent.run("Refund order 7").collect().await;
    /// let Some(AgentEvent::Finished(outcome)) = events.last() else { unreachable!() };
    /// let Termination::Paused(paused) = &outcome.termination else { unreachable!() };
    /// let waiting = &paused.pending()[0];
    /// assert_eq!(waiting.waits_for, WaitsFor::Answer);
    /// assert_eq!(waiting.question.as_ref().unwrap().prompt, "Refund to which account?");
    ///
    /// let answer = Resolutions::new().for_call(waiting, Resolution::Result {
    ///     content: "IBAN DE02".into(),
    ///     is_error: false,
    /// });
    /// let events: Vec<AgentEvent> = agent.resume(paused, answer).collect().await;
    /// assert!(events.iter().any(|e| matches!(
    ///     e,
    ///     AgentEvent::ToolResult { content, .. } if content == "refunded to IBAN DE02"
    /// )));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn ask(question: Question) -> Self {
        ToolError {
            message: format!("the tool asks: {}", question.prompt),
            source: None,
            question: Some(Box::new(question)),
        }
    }

    /// The question, for an error made by [`ask`](Self::ask).
    pub fn question(&self) -> Option<&Question> {
        self.question.as_deref()
    }

    /// A tool error made from another error: its text is the message and it is kept as the
    /// [`source`](StdError::source).
    pub fn from_error(error: impl StdError + Send + Sync + 'static) -> Self {
        ToolError {
            message: error.to_string(),
            source: Some(Arc::new(error)),
            question: None,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The text the model reads: the message, then each cause of the source chain that the
    /// text does not already contain.
    pub(crate) fn model_text(&self) -> String {
        let mut text = self.message.clone();
        let mut next: Option<&(dyn StdError + 'static)> = match &self.source {
            Some(source) => Some(&**source),
            None => None,
        };
        for _ in 0..MAX_CAUSES {
            let Some(cause) = next else {
                break;
            };
            let cause_text = cause.to_string();
            if !cause_text.is_empty() && !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            next = cause.source();
        }
        text
    }
}

impl fmt::Debug for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolError")
            .field("message", &self.message)
            .field("source", &self.source)
            .field("question", &self.question)
            .finish()
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for ToolError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.source {
            Some(source) => Some(&**source),
            None => None,
        }
    }
}

impl PartialEq for ToolError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
    }
}

impl Eq for ToolError {}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::new(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::new(message)
    }
}

impl From<Box<dyn StdError + Send + Sync + 'static>> for ToolError {
    /// Keeps the boxed error as the source (`anyhow::Error` converts into this box).
    fn from(error: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        ToolError {
            message: error.to_string(),
            source: Some(Arc::from(error)),
            question: None,
        }
    }
}

/// `From<E> for ToolError` for each error type, through [`ToolError::from_error`]. (A blanket
/// `impl<E: Error> From<E>` is impossible: it overlaps `From<ToolError> for ToolError`, since
/// `ToolError` is an error itself, and `From<String>`.)
macro_rules! from_errors {
    ($($error:ty),* $(,)?) => {
        $(
            impl From<$error> for ToolError {
                fn from(error: $error) -> Self {
                    ToolError::from_error(error)
                }
            }
        )*
    };
}

from_errors!(
    std::io::Error,
    std::fmt::Error,
    serde_json::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::num::TryFromIntError,
    std::str::ParseBoolError,
    std::char::ParseCharError,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::ffi::NulError,
    std::net::AddrParseError,
    std::env::VarError,
    std::time::SystemTimeError,
    reqwest::Error,
    tokio::task::JoinError,
    tokio::time::error::Elapsed,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(Inner);
    #[derive(Debug)]
    struct Inner;

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("request failed")
        }
    }
    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }
    impl fmt::Display for Inner {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("connection refused")
        }
    }
    impl StdError for Inner {}

    #[test]
    fn the_model_reads_the_message_and_the_causes_it_lacks() {
        let error = ToolError::from_error(Outer(Inner));
        assert_eq!(error.message(), "request failed");
        assert_eq!(error.to_string(), "request failed");
        assert_eq!(error.model_text(), "request failed: connection refused");
        assert!(error.source().unwrap().is::<Outer>());

        assert_eq!(ToolError::new("plain").model_text(), "plain");
        let boxed: Box<dyn StdError + Send + Sync> = Box::new(Outer(Inner));
        let error = ToolError::from(boxed);
        assert!(error.source().unwrap().is::<Outer>());
        assert_eq!(error.model_text(), "request failed: connection refused");
    }

    #[test]
    fn conversions_keep_the_source_and_clones_share_it() {
        fn parse(text: &str) -> Result<u32, ToolError> {
            Ok(text.parse::<u32>()?)
        }
        let error = parse("x").unwrap_err();
        assert_eq!(error.message(), "invalid digit found in string");
        let clone = error.clone();
        assert_eq!(clone, error);
        assert!(clone
            .source()
            .unwrap()
            .downcast_ref::<std::num::ParseIntError>()
            .is_some());
        assert_eq!(ToolError::from("a"), ToolError::from(String::from("a")));
        assert!(ToolError::from("a").source().is_none());
    }
}
