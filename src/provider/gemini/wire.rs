//! Gemini `GenerateContentResponse` and error types (serde), as the stream and whole bodies
//! carry them. Every field is optional and unknown fields are ignored: the decoder is lenient
//! in what it reads.

use serde::Deserialize;
use serde_json::value::RawValue;

/// One `GenerateContentResponse`: a streamed chunk, or the whole answer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Chunk {
    #[serde(default)]
    pub(crate) candidates: Option<Vec<Candidate>>,
    #[serde(default)]
    pub(crate) usage_metadata: Option<UsageMetadata>,
    #[serde(default)]
    pub(crate) prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    pub(crate) model_version: Option<String>,
    #[serde(default)]
    pub(crate) response_id: Option<String>,
    /// An error object (`{"error": {"code", "message", "status"}}`): in-stream, or a 200 body
    /// that is one.
    #[serde(default)]
    pub(crate) error: Option<WireError>,
}

/// One candidate; the decoder reads the first (index 0, or no index).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Candidate {
    #[serde(default)]
    pub(crate) content: Option<Content>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
    /// Why the model stopped, in words (sent with `MALFORMED_FUNCTION_CALL`, say).
    #[serde(default)]
    pub(crate) finish_message: Option<String>,
    #[serde(default)]
    pub(crate) index: Option<u64>,
}

/// `content`: a role and parts.
#[derive(Deserialize)]
pub(crate) struct Content {
    #[serde(default)]
    pub(crate) parts: Option<Vec<Part>>,
}

/// One part. Only the kinds the crate models are read (text, thought text, function calls);
/// others (inline data, executable code …) are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Part {
    #[serde(default)]
    pub(crate) text: Option<String>,
    #[serde(default)]
    pub(crate) thought: Option<bool>,
    #[serde(default)]
    pub(crate) thought_signature: Option<String>,
    #[serde(default)]
    pub(crate) function_call: Option<FunctionCall>,
}

/// `functionCall`: always whole in a stream.
#[derive(Deserialize)]
pub(crate) struct FunctionCall {
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) args: Option<Box<RawValue>>,
}

/// `usageMetadata`.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageMetadata {
    #[serde(default)]
    pub(crate) prompt_token_count: Option<u64>,
    #[serde(default)]
    pub(crate) candidates_token_count: Option<u64>,
    #[serde(default)]
    pub(crate) cached_content_token_count: Option<u64>,
    #[serde(default)]
    pub(crate) thoughts_token_count: Option<u64>,
    #[serde(default)]
    pub(crate) tool_use_prompt_token_count: Option<u64>,
}

/// `promptFeedback`: set when the prompt itself was blocked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptFeedback {
    #[serde(default)]
    pub(crate) block_reason: Option<String>,
}

/// Google's error object (`google.rpc.Status` in JSON): `code`, `message`, `status`.
#[derive(Deserialize, Default)]
pub(crate) struct WireError {
    #[serde(default)]
    pub(crate) code: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) status: Option<String>,
    /// `google.rpc` detail objects (`RetryInfo` with `retryDelay`, `QuotaFailure` …).
    #[serde(default)]
    pub(crate) details: Option<Vec<serde_json::Value>>,
}

/// An error body: `{"error": {…}}`, or (Vertex AI, some proxies) a one-element array of it.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) error: WireError,
}
