//! [`ScriptedResponse`]: a provider-neutral model response written by a test, and
//! [`ScriptedClient`]: an in-process [`LlmClient`] that plays them in order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::LlmError;
use crate::message::{StopReason, Usage};
use crate::provider::{LlmClient, LlmStream, ModelRequest};
use crate::wire::LlmEvent;

/// One scripted model response: content blocks, usage, stop reason, and how it ends.
///
/// Build it with the constructors and chain more blocks with the `then_*` methods. Blocks get
/// consecutive indices in the order they are added. Unless told otherwise the response ends with
/// a [`LlmEvent::Usage`] and a [`LlmEvent::MessageStop`] whose reason is
/// [`StopReason::ToolUse`] when the response calls a tool and [`StopReason::EndTurn`] otherwise.
///
/// The same value drives the in-process [`ScriptedClient`] and the loopback
/// [`MockServer`](crate::testing::MockServer), which encodes it into each provider's SSE.
///
/// ```
/// use agent_loop::testing::ScriptedResponse;
/// use agent_loop::{StopReason, Usage};
/// use serde_json::json;
///
/// let first = ScriptedResponse::thinking("Let me look.", "sig-1")
///     .then_text("Checking the weather.")
///     .then_tool_call("call_1", "get_weather", json!({"city": "Paris"}))
///     .then_tool_call("call_2", "get_time", json!({"tz": "Europe/Paris"}))
///     .usage_tokens(120, 40);
/// let second = ScriptedResponse::text("It is sunny.").stop_reason(StopReason::EndTurn);
/// # let _ = (first, second);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedResponse {
    pub(crate) id: String,
    /// The model named in `MessageStart`; `None`: the model the request asked for.
    pub(crate) model: Option<String>,
    pub(crate) steps: Vec<Step>,
    pub(crate) usage: Option<Usage>,
    pub(crate) stop_reason: Option<StopReason>,
    pub(crate) chunk_chars: Option<usize>,
    pub(crate) ending: Ending,
    /// Whether the response starts with `MessageStart` (false for [`ScriptedResponse::error`]
    /// and raw event scripts).
    pub(crate) preamble: bool,
}

/// One step of a scripted response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// A content block; its events are generated with the next block index.
    Block(Block),
    /// A raw event, sent as it is.
    Event(LlmEvent),
    /// A pause before the next step (in-process client only; the mock server has its own
    /// chunk delays).
    Pause(Duration),
}

/// A content block of a scripted response.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Block {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking(String),
    Compaction {
        id: Option<String>,
        encrypted_content: String,
    },
    Reasoning {
        id: String,
        summary: Vec<String>,
        encrypted_content: Option<String>,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
    Other(serde_json::Value),
}

/// How a scripted response ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ending {
    /// `Usage` and `MessageStop`.
    Complete,
    /// Nothing more: the script's raw events said everything.
    Raw,
    /// The stream fails with this error after the steps.
    Fail(LlmError),
    /// The stream stops producing anything and never ends.
    Stall,
}

impl Default for ScriptedResponse {
    fn default() -> Self {
        ScriptedResponse {
            id: "msg_scripted".to_owned(),
            model: None,
            steps: Vec::new(),
            usage: None,
            stop_reason: None,
            chunk_chars: None,
            ending: Ending::Complete,
            preamble: true,
        }
    }
}

impl ScriptedResponse {
    /// An empty response (no content blocks) that ends normally.
    pub fn new() -> Self {
        Self::default()
    }

    /// A response with one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new().then_text(text)
    }

    /// A response with one tool call whose arguments are `arguments` serialized as JSON.
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        Self::new().then_tool_call(id, name, arguments)
    }

    /// A response with one tool call whose argument text is sent as it is (it need not be valid
    /// JSON: use it to test malformed arguments).
    pub fn tool_call_raw(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self::new().then_tool_call_raw(id, name, arguments)
    }

    /// A response with one thinking block and its signature.
    pub fn thinking(thinking: impl Into<String>, signature: impl Into<String>) -> Self {
        Self::new().then_thinking(thinking, signature)
    }

    /// A response that fails with `error` before sending anything (no `MessageStart`).
    ///
    /// On the [`MockServer`](crate::testing::MockServer) an [`LlmError::Api`] or
    /// [`LlmError::ContextOverflow`] becomes an HTTP error status with the provider's error
    /// body and headers; see [`MockResponse`](crate::testing::MockResponse) for the mapping of
    /// the other errors.
    pub fn error(error: LlmError) -> Self {
        ScriptedResponse {
            preamble: false,
            ending: Ending::Fail(error),
            ..Self::default()
        }
    }

    /// A response made of exactly these events, in order, with nothing added (no
    /// `MessageStart`, no `MessageStop` unless listed). For the in-process client only.
    pub fn from_events(events: impl IntoIterator<Item = LlmEvent>) -> Self {
        ScriptedResponse {
            preamble: false,
            ending: Ending::Raw,
            steps: events.into_iter().map(Step::Event).collect(),
            ..Self::default()
        }
    }

    /// Adds a text block.
    pub fn then_text(mut self, text: impl Into<String>) -> Self {
        self.steps.push(Step::Block(Block::Text(text.into())));
        self
    }

    /// Adds a tool call whose arguments are `arguments` serialized as JSON.
    pub fn then_tool_call(
        self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        let arguments = arguments.to_string();
        self.then_tool_call_raw(id, name, arguments)
    }

    /// Adds a tool call whose argument text is sent as it is.
    pub fn then_tool_call_raw(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        self.steps.push(Step::Block(Block::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }));
        self
    }

    /// Adds a thinking block with its signature (an empty signature sends no signature delta).
    pub fn then_thinking(
        mut self,
        thinking: impl Into<String>,
        signature: impl Into<String>,
    ) -> Self {
        self.steps.push(Step::Block(Block::Thinking {
            thinking: thinking.into(),
            signature: signature.into(),
        }));
        self
    }

    /// Adds a redacted-thinking block.
    pub fn then_redacted_thinking(mut self, data: impl Into<String>) -> Self {
        self.steps
            .push(Step::Block(Block::RedactedThinking(data.into())));
        self
    }

    /// Adds an OpenAI Responses reasoning item: its summary streams as thinking, and the whole
    /// item ends the block (it becomes a
    /// [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning) that goes back to the model).
    ///
    /// ```
    /// use agent_loop::testing::ScriptedResponse;
    /// use serde_json::json;
    ///
    /// let turn = ScriptedResponse::new()
    ///     .then_reasoning("rs_1", ["Need the weather."], Some("gAAAA-opaque"))
    ///     .then_tool_call("call_1", "get_weather", json!({"city": "Paris"}));
    /// # let _ = turn;
    /// ```
    pub fn then_reasoning(
        mut self,
        id: impl Into<String>,
        summary: impl IntoIterator<Item = impl Into<String>>,
        encrypted_content: Option<impl Into<String>>,
    ) -> Self {
        self.steps.push(Step::Block(Block::Reasoning {
            id: id.into(),
            summary: summary.into_iter().map(Into::into).collect(),
            encrypted_content: encrypted_content.map(Into::into),
        }));
        self
    }

    /// Adds an OpenAI Responses compaction item (server-side compaction), as
    /// [`ContentBlock::Compaction`](crate::ContentBlock::Compaction) keeps it. OpenAI's
    /// only: an Anthropic `compaction` block is a block the crate keeps verbatim; script it
    /// with [`then_other_block`](Self::then_other_block)
    /// (`json!({"type": "compaction", "content": "…"})`).
    pub fn then_compaction(
        mut self,
        id: Option<impl Into<String>>,
        encrypted_content: impl Into<String>,
    ) -> Self {
        self.steps.push(Step::Block(Block::Compaction {
            id: id.map(Into::into),
            encrypted_content: encrypted_content.into(),
        }));
        self
    }

    /// Adds a block the crate does not model (for example Anthropic `server_tool_use`, or an
    /// Anthropic `compaction` block), kept verbatim. The [`MockServer`](super::MockServer)
    /// streams it in Anthropic's format as a content block; in OpenAI Responses, a `tool_search_call` or `tool_search_output` item
    /// as `response.output_item.added` / `.done` (other blocks have no place there).
    pub fn then_other_block(mut self, block: serde_json::Value) -> Self {
        self.steps.push(Step::Block(Block::Other(block)));
        self
    }

    /// Adds a raw event at this point of the response.
    pub fn then_event(mut self, event: LlmEvent) -> Self {
        self.steps.push(Step::Event(event));
        self
    }

    /// Waits `delay` before the next step (in-process [`ScriptedClient`] only; uses
    /// `tokio::time`, so it works with a paused clock).
    pub fn then_pause(mut self, delay: Duration) -> Self {
        self.steps.push(Step::Pause(delay));
        self
    }

    /// Ends the response with `error` after the blocks so far, instead of finishing normally
    /// (a failure mid-stream). Blocks added afterwards are still sent before the error.
    pub fn then_fail(mut self, error: LlmError) -> Self {
        self.ending = Ending::Fail(error);
        self
    }

    /// Ends the response by going silent forever after the blocks so far (the stream never
    /// ends; test cancellation and timeouts with it).
    pub fn then_stall(mut self) -> Self {
        self.ending = Ending::Stall;
        self
    }

    /// Sets the usage reported at the end.
    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the usage reported at the end from input and output token counts.
    pub fn usage_tokens(self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage(Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        })
    }

    /// Sets the stop reason (default: `ToolUse` when the response calls a tool, else `EndTurn`).
    pub fn stop_reason(mut self, stop_reason: StopReason) -> Self {
        self.stop_reason = Some(stop_reason);
        self
    }

    /// Splits text, thinking and tool arguments into deltas of at most `chars` characters
    /// (default: one delta per block).
    pub fn chunked(mut self, chars: u32) -> Self {
        self.chunk_chars = Some((chars as usize).max(1));
        self
    }

    /// Sets the response id sent in `MessageStart`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the model name sent in `MessageStart`. Without it the response names the model
    /// the request asked for (the client's, for [`ScriptedClient`]), as a provider does, so
    /// a run's cost is priced at that model.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The model this response names: its own, else `requested`.
    pub(crate) fn model_or<'a>(&'a self, requested: &'a str) -> &'a str {
        self.model.as_deref().unwrap_or(requested)
    }

    /// The stop reason this response reports when it completes.
    pub(crate) fn effective_stop_reason(&self) -> StopReason {
        if let Some(reason) = &self.stop_reason {
            return reason.clone();
        }
        let calls_tool = self
            .steps
            .iter()
            .any(|s| matches!(s, Step::Block(Block::ToolCall { .. })));
        if calls_tool {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        }
    }

    /// Splits `text` into the configured delta sizes, on character boundaries.
    pub(crate) fn pieces<'t>(&self, text: &'t str) -> Vec<&'t str> {
        split_chars(text, self.chunk_chars)
    }

    /// The stream items of this response to a request for `requested`, in order, with
    /// pauses.
    pub(crate) fn script(&self, requested: &str) -> VecDeque<Play> {
        let mut out = VecDeque::new();
        if self.preamble {
            out.push_back(Play::Item(Ok(LlmEvent::MessageStart {
                id: self.id.clone(),
                model: self.model_or(requested).to_owned(),
            })));
        }
        let mut index = 0usize;
        for step in &self.steps {
            match step {
                Step::Event(event) => out.push_back(Play::Item(Ok(event.clone()))),
                Step::Pause(delay) => out.push_back(Play::Pause(*delay)),
                Step::Block(block) => {
                    for event in self.block_events(index, block) {
                        out.push_back(Play::Item(Ok(event)));
                    }
                    index += 1;
                }
            }
        }
        match &self.ending {
            Ending::Complete => {
                out.push_back(Play::Item(Ok(LlmEvent::Usage(
                    self.usage.unwrap_or_default(),
                ))));
                out.push_back(Play::Item(Ok(LlmEvent::MessageStop {
                    stop_reason: self.effective_stop_reason(),
                })));
            }
            Ending::Raw => {}
            Ending::Fail(error) => out.push_back(Play::Item(Err(error.clone()))),
            Ending::Stall => out.push_back(Play::Stall),
        }
        out
    }

    /// The provider-neutral events of one block.
    pub(crate) fn block_events(&self, index: usize, block: &Block) -> Vec<LlmEvent> {
        let mut events = Vec::new();
        match block {
            Block::Text(text) => {
                for piece in self.pieces(text) {
                    events.push(LlmEvent::TextDelta {
                        index,
                        text: piece.to_owned(),
                    });
                }
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                for piece in self.pieces(thinking) {
                    events.push(LlmEvent::ThinkingDelta {
                        index,
                        thinking: piece.to_owned(),
                    });
                }
                if !signature.is_empty() {
                    events.push(LlmEvent::SignatureDelta {
                        index,
                        signature: signature.clone(),
                    });
                }
            }
            Block::RedactedThinking(data) => events.push(LlmEvent::RedactedThinking {
                index,
                data: data.clone(),
            }),
            Block::Compaction {
                id,
                encrypted_content,
            } => events.push(LlmEvent::Compaction {
                index,
                id: id.clone(),
                encrypted_content: encrypted_content.clone(),
            }),
            Block::Reasoning {
                id,
                summary,
                encrypted_content,
            } => {
                for (i, part) in summary.iter().enumerate() {
                    let pieces = self.pieces(part);
                    for (j, piece) in pieces.iter().enumerate() {
                        let separator = if i > 0 && j == 0 { "\n\n" } else { "" };
                        events.push(LlmEvent::ThinkingDelta {
                            index,
                            thinking: format!("{separator}{piece}"),
                        });
                    }
                }
                events.push(LlmEvent::Reasoning {
                    index,
                    id: id.clone(),
                    summary: summary.clone(),
                    encrypted_content: encrypted_content.clone(),
                });
            }
            Block::ToolCall {
                id,
                name,
                arguments,
            } => {
                events.push(LlmEvent::ToolCallStart {
                    index,
                    id: id.clone(),
                    name: name.clone(),
                });
                for piece in self.pieces(arguments) {
                    events.push(LlmEvent::ToolCallDelta {
                        index,
                        partial_json: piece.to_owned(),
                    });
                }
            }
            Block::Other(block) => events.push(LlmEvent::OtherBlock {
                index,
                block: block.clone(),
            }),
        }
        events.push(LlmEvent::BlockStop { index });
        events
    }
}

/// Splits `text` into pieces of at most `chars` characters (one piece when `None`; no piece
/// for an empty text).
pub(crate) fn split_chars(text: &str, chars: Option<usize>) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let Some(n) = chars else {
        return vec![text];
    };
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (pos, _) in text.char_indices() {
        if count == n {
            pieces.push(&text[start..pos]);
            start = pos;
            count = 0;
        }
        count += 1;
    }
    pieces.push(&text[start..]);
    pieces
}

/// One thing the in-process client does while playing a response.
#[derive(Debug)]
pub(crate) enum Play {
    Item(Result<LlmEvent, LlmError>),
    Pause(Duration),
    Stall,
}

/// An in-process [`LlmClient`] that answers each request with the next [`ScriptedResponse`]
/// and records every request it receives.
///
/// Clones share the script and the recorded requests, so a test can keep one handle while the
/// agent owns another. When the script runs out, the stream yields one
/// [`LlmError::InvalidRequest`] saying so (it is not retryable, so the run ends).
///
/// Every request's history is checked (see [`history_violation`](crate::testing::history_violation));
/// violations are recorded, not raised: assert on [`ScriptedClient::history_violations`].
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::{LlmClient, LlmEvent, Message};
/// use agent_loop::provider::ModelRequest;
/// use futures::StreamExt;
///
/// # tokio_test_block(async {
/// let client = ScriptedClient::new([ScriptedResponse::text("hello")]);
/// let request = ModelRequest::new(vec![Message::user("hi")]);
/// let events: Vec<_> = client.stream(&request).collect().await;
/// assert!(events.iter().any(|e| matches!(e, Ok(LlmEvent::TextDelta { text, .. }) if text == "hello")));
/// assert_eq!(client.requests().len(), 1);
/// # });
/// # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ScriptedClient {
    state: Arc<Mutex<ScriptState>>,
    model: String,
}

#[derive(Debug, Default)]
struct ScriptState {
    script: VecDeque<ScriptedResponse>,
    requests: Vec<ModelRequest>,
    violations: Vec<String>,
}

impl ScriptedClient {
    /// A client that plays `responses` in order, one per request.
    pub fn new(responses: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        ScriptedClient {
            state: Arc::new(Mutex::new(ScriptState {
                script: responses.into_iter().collect(),
                ..ScriptState::default()
            })),
            model: String::new(),
        }
    }

    /// Sets the name [`LlmClient::model`] reports (default: empty).
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Appends a response to the script (visible to every clone).
    pub fn push(&self, response: ScriptedResponse) {
        self.lock().script.push_back(response);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    /// The last request received, if any.
    pub fn last_request(&self) -> Option<ModelRequest> {
        self.lock().requests.last().cloned()
    }

    /// How many scripted responses have not been played yet.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    /// The history-invariant violations seen in received requests, one message per request
    /// that had one (empty when every history was valid).
    pub fn history_violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        // A panic while holding the lock cannot leave the state inconsistent (every update is
        // a single push or pop), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the request and takes the next response's script.
    fn begin(&self, request: &ModelRequest) -> VecDeque<Play> {
        let mut state = self.lock();
        state.requests.push(request.clone());
        let number = state.requests.len();
        if let Some(violation) = super::history_violation(&request.messages) {
            state
                .violations
                .push(format!("request #{number}: {violation}"));
        }
        match state.script.pop_front() {
            Some(response) => {
                let requested = match (&request.model, self.model.as_str()) {
                    (Some(model), _) => model.as_str(),
                    (None, "") => "scripted-model",
                    (None, own) => own,
                };
                response.script(requested)
            }
            None => {
                let message = format!(
                    "ScriptedClient: the script ran out: request #{number} has no scripted \
                     response ({} were played); add more ScriptedResponses",
                    number - 1
                );
                VecDeque::from([Play::Item(Err(LlmError::InvalidRequest { message }))])
            }
        }
    }
}

impl LlmClient for ScriptedClient {
    fn stream<'a>(&'a self, request: &'a ModelRequest) -> LlmStream<'a> {
        // Lazy: nothing is recorded or taken from the script until the first poll.
        let stream =
            futures::stream::unfold(None, move |plays: Option<VecDeque<Play>>| async move {
                let mut plays = match plays {
                    Some(plays) => plays,
                    None => self.begin(request),
                };
                loop {
                    match plays.pop_front()? {
                        Play::Item(item) => {
                            if item.is_err() {
                                // An error ends the stream.
                                plays.clear();
                            }
                            return Some((item, Some(plays)));
                        }
                        Play::Pause(delay) => tokio::time::sleep(delay).await,
                        Play::Stall => std::future::pending::<()>().await,
                    }
                }
            });
        Box::pin(stream)
    }

    fn model(&self) -> &str {
        &self.model
    }

    /// `scripted`: the spans of a scripted run say it was no real provider.
    fn provider_name(&self) -> &str {
        "scripted"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_chars_respects_char_boundaries() {
        assert_eq!(split_chars("héllo", Some(2)), vec!["hé", "ll", "o"]);
        assert_eq!(split_chars("abc", None), vec!["abc"]);
        assert!(split_chars("", Some(3)).is_empty());
    }

    #[test]
    fn default_stop_reason_follows_tool_calls() {
        let r = ScriptedResponse::text("a");
        assert_eq!(r.effective_stop_reason(), StopReason::EndTurn);
        let r = r.then_tool_call("1", "t", serde_json::json!({}));
        assert_eq!(r.effective_stop_reason(), StopReason::ToolUse);
    }
}
