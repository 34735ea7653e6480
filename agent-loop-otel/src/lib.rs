//! OpenTelemetry export of [`agent_loop`]'s spans: OTLP over HTTP, protobuf.
//!
//! The agent always reports its work as `tracing` spans shaped by OpenTelemetry's GenAI
//! semantic conventions (`invoke_agent {agent}`, `chat {model}`, `execute_tool {tool}`; see
//! docs/guide/observability.md). This crate sends them to an OTLP collector: [`init`]
//! builds the exporter from the standard environment variables and installs a `tracing`
//! subscriber that exports every span; [`OtelBuilder`] sets the endpoint and service name in
//! code, and [`OtelGuard::layer`] gives the layer alone, to add to a subscriber of your own.
//!
//! The environment variables read (code settings win over them):
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL), else `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (the base: `/v1/traces` is appended), else `http://localhost:4318/v1/traces`;
//! - `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`);
//! - `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds, default
//!   10 000);
//! - `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! Spans are exported in batches from a thread of the SDK's; [`OtelGuard::flush`] sends
//! what is pending and waits, and dropping the guard (or [`OtelGuard::shutdown`]) flushes
//! and stops the exporter.

#![warn(missing_docs, unreachable_pub)]

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

/// The longest collector answer read (the exporter needs only its status and a short body).
const MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// The export timeout when no environment variable sets one (the OTLP default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the exporter could not be set up, or a flush failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The exporter could not be built (an invalid endpoint or header, say).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
    /// A global `tracing` subscriber was set already ([`OtelBuilder::init`]); use
    /// [`OtelBuilder::build`] and add [`OtelGuard::layer`] to it instead.
    #[error("a global tracing subscriber is set already: {0}")]
    Subscriber(String),
    /// Flushing or shutting down the exporter failed (the collector refused the spans or
    /// could not be reached in time).
    #[error("exporting spans failed: {0}")]
    Export(String),
}

/// Builds the OTLP exporter from the environment; every setting here overrides its variable.
#[derive(Debug, Clone, Default)]
pub struct OtelBuilder {
    endpoint: Option<String>,
    service_name: Option<String>,
    headers: HashMap<String, String>,
}

/// Exports the agent's spans to the OTLP/HTTP endpoint the environment names, and installs
/// a global `tracing` subscriber that sends every span there. Keep the guard for the life of
/// the program: dropping it flushes and stops the exporter.
///
/// Call it inside a tokio runtime or outside one; it starts no task.
///
/// ```no_run
/// # fn main() -> Result<(), agent_loop_otel::OtelError> {
/// // OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 OTEL_SERVICE_NAME=my-agent
/// let telemetry = agent_loop_otel::init()?;
/// // ... build agents and run them: their spans are exported in batches ...
/// telemetry.shutdown()?; // sends what is left
/// # Ok(())
/// # }
/// ```
pub fn init() -> Result<OtelGuard, OtelError> {
    OtelBuilder::new().init()
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`'s tracer, for
/// a provider built by hand (another exporter, another processor).
///
/// ```
/// use agent_loop_otel as otel;
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
/// let subscriber = tracing_subscriber::registry().with(otel::layer(&provider));
/// let _guard = tracing::subscriber::set_default(subscriber);
/// ```
pub fn layer<S>(provider: &SdkTracerProvider) -> OpenTelemetryLayer<S, SdkTracer>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(env!("CARGO_PKG_NAME")))
        // The file, line, thread, module and busy/idle times of each span are noise beside
        // the conventions' attributes.
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
}

impl OtelBuilder {
    /// Settings from the environment only.
    pub fn new() -> Self {
        OtelBuilder::default()
    }

    /// The full URL spans are posted to (`http://collector:4318/v1/traces`), over
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` and `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The `service.name` of the spans' resource, over `OTEL_SERVICE_NAME`.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// A header sent with every export (an API key, say), over the same header from
    /// `OTEL_EXPORTER_OTLP_HEADERS`.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The exporter and its tracer provider, with nothing installed: add
    /// [`OtelGuard::layer`] to your subscriber.
    pub fn build(self) -> Result<OtelGuard, OtelError> {
        let client = BlockingClient::new(export_timeout())?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client);
        if let Some(endpoint) = self.endpoint {
            exporter = exporter.with_endpoint(endpoint);
        }
        if !self.headers.is_empty() {
            exporter = exporter.with_headers(self.headers);
        }
        let exporter = exporter
            .build()
            .map_err(|e| OtelError::Exporter(e.to_string()))?;
        let mut resource = Resource::builder();
        if let Some(name) = self.service_name {
            resource = resource.with_service_name(name);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(OtelGuard {
            provider,
            shut_down: false,
        })
    }

    /// [`build`](Self::build), then installs a global `tracing` subscriber (a registry with
    /// the OpenTelemetry layer) and the global OpenTelemetry tracer provider.
    pub fn init(self) -> Result<OtelGuard, OtelError> {
        let guard = self.build()?;
        let subscriber = tracing_subscriber::registry().with(guard.layer());
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|e| OtelError::Subscriber(e.to_string()))?;
        opentelemetry::global::set_tracer_provider(guard.provider.clone());
        Ok(guard)
    }
}

/// The exporter's tracer provider; dropping it flushes and stops the exporter.
pub struct OtelGuard {
    provider: SdkTracerProvider,
    shut_down: bool,
}

impl fmt::Debug for OtelGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelGuard")
            .field("shut_down", &self.shut_down)
            .finish_non_exhaustive()
    }
}

impl OtelGuard {
    /// The `tracing` layer that exports spans through this guard's provider.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        layer(&self.provider)
    }

    /// The tracer provider (for other instrumentation that takes one).
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Exports every finished span now and waits until the collector has answered.
    /// Blocks the calling thread (briefly, in an async task).
    pub fn flush(&self) -> Result<(), OtelError> {
        self.provider
            .force_flush()
            .map_err(|e| OtelError::Export(e.to_string()))
    }

    /// Flushes and stops the exporter; later spans are dropped.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shut_down = true;
        self.provider
            .shutdown()
            .map_err(|e| OtelError::Export(e.to_string()))
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if !self.shut_down {
            // Nowhere to report a failure at drop; `shutdown` returns it.
            let _ = self.provider.shutdown();
        }
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds).
fn export_timeout() -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
    .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// The exporter's HTTP client: the crate's own reqwest (0.12, with its rustls), blocking,
/// because the SDK's batch processor exports from a thread of its own with no async runtime.
/// Redirects are not followed, so the headers (API keys) go to the configured host only.
#[derive(Debug)]
struct BlockingClient(reqwest::blocking::Client);

impl BlockingClient {
    fn new(timeout: Duration) -> Result<Self, OtelError> {
        // A blocking client starts a runtime of its own, which may not happen inside an
        // async context: it is built on a thread of its own.
        let build = move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .redirect(reqwest::redirect::Policy::none())
                .build()
        };
        std::thread::spawn(build)
            .join()
            .map_err(|_| OtelError::Exporter("building the HTTP client panicked".to_owned()))?
            .map(BlockingClient)
            .map_err(|e| OtelError::Exporter(e.to_string()))
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let mut builder = Response::builder().status(response.status());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        response.take(MAX_RESPONSE_BYTES).read_to_end(&mut body)?;
        Ok(builder.body(Bytes::from(body))?)
    }
}
