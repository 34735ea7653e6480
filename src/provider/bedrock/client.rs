//! The Bedrock client: `POST {base}/model/{modelId}/converse-stream`, signed with SigV4 (the
//! AWS SDK's own signer) or sent with a Bedrock API key as a bearer token.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::error::{ApiError, ConfigError, Error, LlmError};
use crate::provider::transport::http::{
    join_url, HttpRequest, HttpSettings, ProviderSpec, Secret, Transport,
};
use crate::provider::ModelRequest;
use crate::wire::WireFormat;

use super::request;

/// The SigV4 signing name of Bedrock Runtime.
const SERVICE: &str = "bedrock";

static SPEC: ProviderSpec = ProviderSpec {
    format: WireFormat::Bedrock,
    parse_error_body,
    is_context_overflow,
    auth_hint: "the AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with \
                AWS_SESSION_TOKEN for temporary ones), or a Bedrock API key in \
                AWS_BEARER_TOKEN_BEDROCK, or those given to BedrockClient",
};

/// A value that never shows in `Debug` output.
#[derive(Clone)]
struct Hidden(String);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"[redacted]\"")
    }
}

/// AWS credentials for SigV4: an access key id, its secret access key and, for temporary
/// credentials (STS, SSO, an assumed role), a session token.
///
/// `Debug` shows the access key id (it is sent in every request's `Authorization` header)
/// and never the secret key or the session token.
///
/// ```
/// use agent_loop::provider::bedrock::AwsCredentials;
///
/// let credentials = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", None);
/// assert_eq!(credentials.access_key_id(), "AKIDEXAMPLE");
/// assert!(!format!("{credentials:?}").contains("wJalr"));
/// ```
#[derive(Clone)]
pub struct AwsCredentials {
    access_key_id: String,
    secret_access_key: Hidden,
    session_token: Option<Hidden>,
}

impl AwsCredentials {
    /// Credentials from their parts.
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: Hidden(secret_access_key.into()),
            session_token: session_token.filter(|t| !t.is_empty()).map(Hidden),
        }
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key)
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// Where a [`BedrockClient`] gets its AWS credentials for each request: implement it to use
/// credentials that expire and are renewed (an assumed role, SSO, instance metadata).
///
/// It is called once per request, when the request is signed, on the task that sends it, so
/// it must be quick and must not block: return credentials held in memory, and renew them
/// elsewhere (a background task) before they expire. An error fails the request with it.
/// Its `Debug` shows in the client's: never print the secret key or the session token there
/// ([`AwsCredentials`]' own `Debug` does not). `AwsCredentials` is itself a provider of
/// fixed credentials.
///
/// ```
/// use std::sync::{Arc, RwLock};
/// use agent_loop::{BedrockClient, LlmError};
/// use agent_loop::provider::bedrock::{AwsCredentials, AwsCredentialsProvider};
///
/// #[derive(Debug)]
/// struct Renewed(RwLock<AwsCredentials>);
///
/// impl AwsCredentialsProvider for Renewed {
///     fn credentials(&self) -> Result<AwsCredentials, LlmError> {
///         Ok(self.0.read().expect("not poisoned").clone())
///     }
/// }
///
/// let provider = Arc::new(Renewed(RwLock::new(AwsCredentials::new("AKID", "secret", None))));
/// let client = BedrockClient::new("us-east-1").credentials_provider(provider.clone());
/// // elsewhere: *provider.0.write().unwrap() = fresh;
/// # let _ = client;
/// ```
pub trait AwsCredentialsProvider: Send + Sync + fmt::Debug {
    /// The credentials to sign the next request with.
    fn credentials(&self) -> Result<AwsCredentials, LlmError>;
}

impl AwsCredentialsProvider for AwsCredentials {
    fn credentials(&self) -> Result<AwsCredentials, LlmError> {
        Ok(self.clone())
    }
}

/// How requests are authenticated.
#[derive(Debug, Clone)]
enum Auth {
    None,
    /// A Bedrock API key: `authorization: Bearer …`, no signing.
    ApiKey(Secret),
    /// SigV4 with the provider's credentials.
    SigV4(Arc<dyn AwsCredentialsProvider>),
}

/// A streaming client for Amazon Bedrock's Converse API
/// (`POST {base_url}/model/{modelId}/converse-stream`), behind the cargo feature `bedrock`.
///
/// ```no_run
/// use std::time::Duration;
/// use agent_loop::{BedrockClient};
/// use agent_loop::provider::transport::RetryPolicy;
///
/// let client = BedrockClient::new("us-east-1")
///     .model("us.anthropic.claude-sonnet-4-5-20250929-v1:0")
///     .credentials("AKID…", "secret…", None)
///     .idle_timeout(Duration::from_secs(60))
///     .retry_policy(RetryPolicy::default().max_retries(5));
/// // or: BedrockClient::from_env()? reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
/// // AWS_SESSION_TOKEN (or AWS_BEARER_TOKEN_BEDROCK), AWS_REGION and BEDROCK_MODEL
/// ```
///
/// Requests are signed with AWS Signature Version 4 (service `bedrock`, the client's region)
/// by the AWS SDK's signer, at the time they are first sent: `authorization`, `x-amz-date`
/// and, with temporary credentials, `x-amz-security-token` (marked sensitive). A Bedrock API
/// key ([`api_key`](Self::api_key)) is sent as `authorization: Bearer …` instead, unsigned;
/// when both are set, the key wins, as in the AWS SDKs. Neither the secret key, the session
/// token nor the API key ever appears in `Debug` output or errors.
///
/// The model id goes in the URL path percent-encoded, as AWS requires (`:` in versioned ids
/// and inference-profile ARNs becomes `%3A`, `/` becomes `%2F`). The default base URL is
/// `https://bedrock-runtime.{region}.amazonaws.com`.
///
/// Retries, timeouts and stream limits work as for [`AnthropicClient`](crate::AnthropicClient);
/// a retry sends the request as it was signed (a signature is valid for five minutes).
/// Throttling (`429 ThrottlingException`, in-stream `throttlingException`), `503`
/// `ServiceUnavailableException`, `500` and the in-stream `internalServerException`,
/// `modelStreamErrorException` and `serviceUnavailableException` are retried; a `400`
/// `ValidationException` saying the input is too long is [`LlmError::ContextOverflow`].
///
/// Timeouts (each its own setting): connect 10 s, first byte (response headers) 120 s, idle
/// 120 s between content events, no total limit.
#[derive(Debug, Clone)]
pub struct BedrockClient {
    region: String,
    base_url: Option<String>,
    model: String,
    auth: Auth,
    transport: Transport,
}

impl BedrockClient {
    /// A client for the Bedrock Runtime endpoint of `region` (`us-east-1`, `eu-west-3` …),
    /// with no model and no credentials yet.
    pub fn new(region: impl Into<String>) -> Self {
        BedrockClient {
            region: region.into().trim().to_owned(),
            base_url: None,
            model: String::new(),
            auth: Auth::None,
            transport: Transport::new(HttpSettings::new(Duration::from_secs(120))),
        }
    }

    /// A client configured from the environment, as the AWS SDKs read it:
    ///
    /// - the region: `AWS_REGION`, else `AWS_DEFAULT_REGION` (required);
    /// - a Bedrock API key in `AWS_BEARER_TOKEN_BEDROCK`, which wins when set; else
    ///   `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (both required), with
    ///   `AWS_SESSION_TOKEN` for temporary credentials;
    /// - the endpoint: `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`, else `AWS_ENDPOINT_URL` (optional);
    /// - the model: `BEDROCK_MODEL` (optional).
    ///
    /// Fails with [`Error::Config`] naming the variable that is missing.
    ///
    /// ```no_run
    /// let client = agent_loop::BedrockClient::from_env()?;
    /// # Ok::<(), agent_loop::Error>(())
    /// ```
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let missing = |variable: &'static str, message: &str| {
            Error::Config(ConfigError::Env {
                variable,
                message: message.to_owned(),
            })
        };
        let region = get("AWS_REGION")
            .or_else(|| get("AWS_DEFAULT_REGION"))
            .ok_or_else(|| {
                missing(
                    "AWS_REGION",
                    "not set (nor AWS_DEFAULT_REGION): export the AWS region of your Bedrock \
                     models, for example us-east-1",
                )
            })?;
        let mut client = BedrockClient::new(region);
        if let Some(token) = get("AWS_BEARER_TOKEN_BEDROCK") {
            client = client.api_key(token);
        } else {
            let key = get("AWS_ACCESS_KEY_ID").ok_or_else(|| {
                missing(
                    "AWS_ACCESS_KEY_ID",
                    "not set: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and \
                     AWS_SESSION_TOKEN for temporary credentials), or a Bedrock API key in \
                     AWS_BEARER_TOKEN_BEDROCK",
                )
            })?;
            let secret = get("AWS_SECRET_ACCESS_KEY").ok_or_else(|| {
                missing(
                    "AWS_SECRET_ACCESS_KEY",
                    "not set: AWS_ACCESS_KEY_ID needs its secret access key",
                )
            })?;
            client = client.credentials(key, secret, get("AWS_SESSION_TOKEN"));
        }
        if let Some(url) =
            get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME").or_else(|| get("AWS_ENDPOINT_URL"))
        {
            client = client.base_url(url);
        }
        if let Some(model) = get("BEDROCK_MODEL") {
            client = client.model(model);
        }
        Ok(client)
    }

    /// The server's base URL (default `https://bedrock-runtime.{region}.amazonaws.com`);
    /// requests go to `{base_url}/model/{modelId}/converse-stream`. A trailing slash is
    /// ignored. Requests are still signed for the client's region.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into().trim_end_matches('/').to_owned());
        self
    }

    /// The model id (or inference profile id or ARN) used when a request names none.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Signs requests with these AWS credentials (SigV4); `session_token` for temporary
    /// credentials.
    pub fn credentials(
        self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.credentials_provider(Arc::new(AwsCredentials::new(
            access_key_id,
            secret_access_key,
            session_token,
        )))
    }

    /// Signs each request with the credentials `provider` gives at that moment (see
    /// [`AwsCredentialsProvider`]).
    pub fn credentials_provider(mut self, provider: Arc<dyn AwsCredentialsProvider>) -> Self {
        if !matches!(self.auth, Auth::ApiKey(_)) {
            self.auth = Auth::SigV4(provider);
        }
        self
    }

    /// Authenticates with a Bedrock API key (`authorization: Bearer …`) instead of signing;
    /// it wins over credentials.
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.auth = Auth::ApiKey(Secret::new(api_key));
        self
    }

    crate::provider::transport::http::transport_setters!(
        "for example `x-amzn-bedrock-trace`",
        "120 s",
        "ConverseStream sends no keep-alives."
    );

    /// The URL requests for `model` go to.
    fn url(&self, model: &str) -> Result<String, LlmError> {
        let base = match &self.base_url {
            Some(base) => base.clone(),
            None => {
                if self.region.is_empty()
                    || !self
                        .region
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return Err(LlmError::InvalidRequest {
                        message: format!(
                            "{:?} is not an AWS region (BedrockClient::new(\"us-east-1\"), or \
                             AWS_REGION)",
                            self.region
                        ),
                    });
                }
                format!("https://bedrock-runtime.{}.amazonaws.com", self.region)
            }
        };
        Ok(join_url(
            &base,
            &format!("/model/{}/converse-stream", encode_label(model)),
        ))
    }

    fn build(&self, request: &ModelRequest) -> Result<HttpRequest, LlmError> {
        let model = request.model.as_deref().unwrap_or(&self.model);
        if model.is_empty() {
            return Err(LlmError::InvalidRequest {
                message: "no model: set one with BedrockClient::model(..) (or BEDROCK_MODEL), \
                          or in ModelRequest::model"
                    .to_owned(),
            });
        }
        let body = request::encode(request)?;
        let mut http = HttpRequest::json(
            self.url(model)?,
            body,
            HeaderMap::new(),
            &self.transport.settings().headers,
        )?;
        http.headers.insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("application/vnd.amazon.eventstream"),
        );
        match &self.auth {
            Auth::ApiKey(key) => {
                http.headers
                    .insert(reqwest::header::AUTHORIZATION, key.header_value("Bearer ")?);
            }
            Auth::SigV4(provider) => {
                let credentials = provider.credentials()?;
                let signed = sign_headers(
                    &http.url,
                    &http.headers,
                    &http.body,
                    &credentials,
                    &self.region,
                    SERVICE,
                    SystemTime::now(),
                )?;
                http.headers.extend(signed);
            }
            Auth::None => {
                return Err(LlmError::InvalidRequest {
                    message: "no AWS credentials: set them with BedrockClient::credentials(..), \
                              ::credentials_provider(..) or ::api_key(..), or use \
                              BedrockClient::from_env()"
                        .to_owned(),
                })
            }
        }
        Ok(http)
    }
}

/// A URL path label as AWS encodes it: everything but the unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) percent-encoded, `/` and `:` included.
fn encode_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The SigV4 headers (`authorization`, `x-amz-date`, `x-amz-security-token`) for a POST of
/// `body` to `url` with `headers`, signed at `time` by the AWS SDK's signer. Every header
/// given is signed (less those the signer leaves out, such as `user-agent`), and `host` from
/// the URL.
pub(crate) fn sign_headers(
    url: &str,
    headers: &HeaderMap,
    body: &[u8],
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Result<HeaderMap, LlmError> {
    let failed = |what: &str| LlmError::InvalidRequest {
        message: format!("could not sign the request with SigV4: {what}"),
    };
    let identity: Identity = Credentials::new(
        credentials.access_key_id.clone(),
        credentials.secret_access_key.0.clone(),
        credentials.session_token.as_ref().map(|t| t.0.clone()),
        None,
        "agent-loop",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(&e.to_string()))?
        .into();
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let signable = SignableRequest::new("POST", url, pairs.into_iter(), SignableBody::Bytes(body))
        .map_err(|e| failed(&e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| failed(&e.to_string()))?
        .into_parts();
    let (signed, _query) = instructions.into_parts();
    let mut out = HeaderMap::new();
    for header in signed {
        let name = HeaderName::try_from(header.name())
            .map_err(|_| failed("the signer gave an invalid header name"))?;
        let mut value = HeaderValue::try_from(header.value())
            .map_err(|_| failed("a credential holds characters not allowed in a header"))?;
        value.set_sensitive(header.sensitive() || name == reqwest::header::AUTHORIZATION);
        out.insert(name, value);
    }
    Ok(out)
}

crate::provider::transport::http::llm_client!(
    BedrockClient,
    spec: |_client| &SPEC,
    model: |client| &client.model,
    provider: |_client| "aws.bedrock",
    strict: None,
);

/// An AWS error body: `{"message": …}` (the type is in `x-amzn-ErrorType`, read with the
/// head), with `__type` or `code` where a proxy puts the type in the body; also the
/// `{"error": {"type", "message"}}` shape of Anthropic-style mock servers.
fn parse_error_body(body: &[u8], error: &mut ApiError) -> bool {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(body)
    else {
        return false;
    };
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let nested = map.get("error").filter(|e| e.is_object());
    let message = text(map.get("message"))
        .or_else(|| text(map.get("Message")))
        .or_else(|| text(nested.and_then(|e| e.get("message"))));
    let kind = text(map.get("__type"))
        .or_else(|| text(map.get("code")))
        .or_else(|| text(nested.and_then(|e| e.get("type"))))
        .map(|t| {
            // `com.amazon.coral.validate#ValidationException`, `ThrottlingException:http://…`
            let t = t.rsplit('#').next().unwrap_or_default();
            t.split(':').next().unwrap_or_default().to_owned()
        })
        .filter(|t| !t.is_empty());
    let Some(message) = message else {
        return false;
    };
    error.message = message;
    if kind.is_some() {
        error.error_type = kind;
    }
    true
}

/// Bedrock refuses an oversized prompt with a 400 `ValidationException` ("Input is too long
/// for requested model.", or the model's own "prompt is too long: N tokens > M maximum").
fn is_context_overflow(error: &ApiError) -> bool {
    if error.status != 400 {
        return false;
    }
    let message = error.message.to_ascii_lowercase();
    [
        "input is too long",
        "prompt is too long",
        "too many input tokens",
        "too many tokens",
        "context window",
        "context length",
    ]
    .iter()
    .any(|needle| message.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::LlmClient;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn from_env_reads_region_credentials_endpoint_and_model() {
        let err = BedrockClient::from_lookup(env(&[])).unwrap_err();
        assert!(err.to_string().contains("AWS_REGION"), "{err}");
        let err =
            BedrockClient::from_lookup(env(&[("AWS_DEFAULT_REGION", "eu-west-3")])).unwrap_err();
        assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
        let err = BedrockClient::from_lookup(env(&[
            ("AWS_REGION", "eu-west-3"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");

        let client = BedrockClient::from_lookup(env(&[
            ("AWS_DEFAULT_REGION", "eu-west-3"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "very-secret-key"),
            ("AWS_SESSION_TOKEN", "very-secret-token"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/"),
            ("BEDROCK_MODEL", "anthropic.claude-v2:1"),
        ]))
        .unwrap();
        assert_eq!(client.region, "eu-west-3");
        assert_eq!(client.base_url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(LlmClient::model(&client), "anthropic.claude-v2:1");
        assert!(matches!(client.auth, Auth::SigV4(_)));
        let debug = format!("{client:?}");
        assert!(!debug.contains("very-secret"), "{debug}");
        assert!(debug.contains("AKID"));

        let client = BedrockClient::from_lookup(env(&[
            ("AWS_REGION", "us-west-2"),
            ("AWS_DEFAULT_REGION", "eu-west-3"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "very-secret-key"),
            ("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-secret"),
            ("AWS_ENDPOINT_URL", "http://a.test"),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "http://b.test"),
        ]))
        .unwrap();
        assert_eq!(client.region, "us-west-2");
        assert_eq!(client.base_url.as_deref(), Some("http://b.test"));
        assert!(matches!(client.auth, Auth::ApiKey(_)));
        assert!(!format!("{client:?}").contains("bedrock-api-key-secret"));
    }

    #[test]
    fn model_ids_are_percent_encoded_in_the_path() {
        let client = BedrockClient::new("us-east-1");
        assert_eq!(
            client.url("anthropic.claude-3-5-sonnet-20240620-v1:0").unwrap(),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
        );
        assert_eq!(
            client
                .url("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-v2")
                .unwrap(),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-v2/converse-stream"
        );
        assert!(BedrockClient::new("us-east-1/../x").url("m").is_err());
    }

    /// The AWS SigV4 test suite's `post-vanilla` vector (in aws-sigv4's own test suite).
    #[test]
    fn signing_matches_the_aws_test_suite() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 2015-08-30T12:36:00Z
        let credentials = AwsCredentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
        );
        let signed = sign_headers(
            "https://example.amazonaws.com/",
            &HeaderMap::new(),
            b"",
            &credentials,
            "us-east-1",
            "service",
            time,
        )
        .unwrap();
        assert_eq!(signed["x-amz-date"], "20150830T123600Z");
        assert_eq!(
            signed["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
        assert!(signed["authorization"].is_sensitive());
        assert!(signed.get("x-amz-security-token").is_none());
        let with_token = AwsCredentials::new("AKID", "secret", Some("token".into()));
        let signed = sign_headers(
            "https://example.amazonaws.com/",
            &HeaderMap::new(),
            b"",
            &with_token,
            "us-east-1",
            "service",
            time,
        )
        .unwrap();
        assert_eq!(signed["x-amz-security-token"], "token");
        assert!(signed["authorization"]
            .to_str()
            .unwrap()
            .contains("SignedHeaders=host;x-amz-date;x-amz-security-token"));
    }

    #[test]
    fn error_bodies_and_overflow_are_recognized() {
        let mut e = ApiError::new(400, "");
        e.error_type = Some("ValidationException".into());
        assert!(parse_error_body(
            br#"{"message":"Input is too long for requested model."}"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("ValidationException"));
        assert!(is_context_overflow(&e));
        let mut e = ApiError::new(400, "");
        assert!(parse_error_body(
            br#"{"__type":"com.amazon.coral.validate#ValidationException","Message":"bad"}"#,
            &mut e
        ));
        assert_eq!(e.error_type.as_deref(), Some("ValidationException"));
        assert_eq!(e.message, "bad");
        assert!(!is_context_overflow(&e));
        let mut e = ApiError::new(500, "");
        assert!(parse_error_body(
            br#"{"type":"error","error":{"type":"server_error","message":"boom"}}"#,
            &mut e
        ));
        assert_eq!(e.message, "boom");
        assert!(!parse_error_body(b"<html>bad gateway</html>", &mut e));
    }
}
