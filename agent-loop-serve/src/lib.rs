//! Serve an [`agent_loop`] agent to other programs, in the protocols they already speak:
//!
//! - [`responses`] (feature `responses`, on by default): an [Open Responses] endpoint,
//!   `POST /v1/responses`, streamed (Server-Sent Events of the Responses event types) or
//!   whole. The agent's text is `output_text`; its tool calls are `function_call` items, each
//!   followed by a `function_call_output` item with the tool's result. Any OpenAI Responses
//!   client talks to it: the official `openai` SDKs, or [`agent_loop::OpenAiClient`] in its
//!   Responses mode.
//! - [`mcp`] (feature `mcp`, on by default): an MCP server, over stdio or streamable HTTP,
//!   with one tool whose input is the task and whose result is the agent's answer; progress
//!   as MCP progress notifications, a paused run's questions as elicitations (MCP 2025-11-25)
//!   or an `input_required` result (MCP 2026-07-28), the client's
//!   cancellation cancelling the run. Any MCP client calls it: the official SDKs, or
//!   `agent-loop-mcp` (an agent-loop agent using another as a tool).
//! - [`a2a`] (feature `a2a`, on by default): an A2A 1.0 server (JSON-RPC binding): the agent
//!   card, `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`; tasks whose
//!   conversations and pauses are kept in the service's session store, a paused run being
//!   `input-required` until a message answers it. The official `a2a-sdk` client talks to it.
//!
//! A server is an [`AgentService`]: how to build the agent of one run (an [`AgentFactory`],
//! any `Fn() -> AgentBuilder`), the session store its conversations are kept in (where a
//! protocol keeps state across requests: A2A's tasks), and its [`Limits`] (the largest request body, how many
//! runs at once). Each protocol gives an axum [`Router`](axum::Router) over it, to serve with
//! `axum::serve` or to merge into a host's own router.
//!
//! Bad input gets the protocol's own error (for Open Responses an HTTP 4xx with the spec's
//! `{"error": {…}}` body), never a panic; a request past the limits is refused at once (413
//! for a body too large, 429 when every run slot is taken), never queued without bound.
//!
//! Callers: every router asks the service's [authenticator](AgentService::authenticate) who
//! made each request ([`auth`]: bearer tokens built in, or a principal from the host's own
//! tower layer) and refuses the others in its protocol's way; what a caller makes (A2A tasks
//! and contexts, MCP sessions and parked runs) is its own, and ids are unguessable. With no
//! authenticator a service answers loopback peers only, unless the host calls
//! [`allow_anonymous`](AgentService::allow_anonymous).
//!
//! ```
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::Agent;
//! use agent_loop_serve::auth::{BearerTokens, Principal};
//! use agent_loop_serve::{AgentService, Limits};
//! use axum::body::Body;
//! use axum::http::Request;
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Each run gets a fresh agent, with a fresh model (here a scripted one, offline).
//! let service = AgentService::new(|| {
//!     Agent::builder(ScriptedClient::new([ScriptedResponse::text("Hi!")])).system("Be brief.")
//! })
//! .authenticate(BearerTokens::new().token("s3cret", Principal::new("alice")))
//! .limits(Limits::new().max_body_bytes(256 * 1024).max_concurrent_runs(8));
//! let router: axum::Router = agent_loop_serve::responses::router(&service);
//! // axum::serve(tokio::net::TcpListener::bind("127.0.0.1:8080").await?, router).await?;
//!
//! for _ in 0..2 {
//!     let request = Request::post("/v1/responses")
//!         .header("authorization", "Bearer s3cret")
//!         .header("content-type", "application/json")
//!         .body(Body::from(r#"{"model": "agent", "input": "Hello?"}"#))
//!         .unwrap();
//!     let response = router.clone().oneshot(request).await.unwrap();
//!     assert_eq!(response.status(), 200);
//!     let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
//!     let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
//!     assert_eq!(body["output"][0]["content"][0]["text"], "Hi!");
//! }
//! // No token: 401, with OpenAI's error body.
//! let request = Request::post("/v1/responses")
//!     .body(Body::from(r#"{"model": "agent", "input": "Hello?"}"#))
//!     .unwrap();
//! assert_eq!(router.oneshot(request).await.unwrap().status(), 401);
//! # }
//! ```
//!
//! [Open Responses]: https://www.openresponses.org

#![warn(missing_docs, unreachable_pub)]
// With no protocol feature only the service type is left, unused inside the crate.
#![cfg_attr(
    not(any(feature = "responses", feature = "mcp", feature = "a2a")),
    allow(dead_code)
)]

/// The guide's page on serving (docs/guide/serving.md), its examples compiled as doctests.
#[cfg(all(doctest, feature = "responses", feature = "mcp", feature = "a2a"))]
#[doc = include_str!("../../docs/guide/serving.md")]
pub struct GuideServingDoctests;

#[cfg(feature = "a2a")]
pub mod a2a;
pub mod auth;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "responses")]
pub mod responses;

use std::fmt;
use std::sync::Arc;

use agent_loop::session::{MemoryStore, SessionStore};
use agent_loop::{Agent, AgentBuilder, Error};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::{Access, Authenticator};

/// Builds the agent of one run. Each request gets a fresh agent: its conversation is what
/// the request carries (Open Responses), or its session's (A2A: the service gives the builder
/// a [`session`](AgentBuilder::session) in its store). Implemented for every
/// `Fn() -> AgentBuilder + Send + Sync`.
pub trait AgentFactory: Send + Sync + 'static {
    /// The builder of a new agent, with no conversation and no session.
    fn builder(&self) -> AgentBuilder;
}

impl<F> AgentFactory for F
where
    F: Fn() -> AgentBuilder + Send + Sync + 'static,
{
    fn builder(&self) -> AgentBuilder {
        self()
    }
}

/// What a server takes from its clients at most.
///
/// ```
/// use agent_loop_serve::Limits;
/// let limits = Limits::new().max_body_bytes(64 * 1024).max_concurrent_runs(2);
/// assert_eq!(limits.body_bytes(), 64 * 1024);
/// assert_eq!(limits.concurrent_runs(), 2);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_body_bytes: usize,
    max_concurrent_runs: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1024 * 1024,
            max_concurrent_runs: 16,
        }
    }
}

impl Limits {
    /// The defaults: request bodies up to 1 MiB, 16 runs at once.
    pub fn new() -> Self {
        Limits::default()
    }

    /// The largest request body taken (bytes); a larger one is refused with 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// How many runs may be in flight at once (at least 1); one more is refused with 429
    /// (never queued) until a run ends.
    pub fn max_concurrent_runs(mut self, runs: usize) -> Self {
        self.max_concurrent_runs = runs.max(1);
        self
    }

    /// The largest request body taken, in bytes.
    pub fn body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// How many runs may be in flight at once.
    pub fn concurrent_runs(&self) -> usize {
        self.max_concurrent_runs
    }
}

/// An agent to serve: how to build the agent of a run, and the server's [`Limits`]. Cheap to
/// clone (clones share the run slots), so one service can back every protocol's router.
#[derive(Clone)]
pub struct AgentService {
    factory: Arc<dyn AgentFactory>,
    limits: Limits,
    runs: Arc<Semaphore>,
    sessions: Arc<dyn SessionStore>,
    access: Access,
}

impl fmt::Debug for AgentService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let access = match self.access {
            Access::LoopbackOnly => "loopback peers only",
            Access::Anyone => "anyone (allow_anonymous)",
            Access::Authenticated(_) => "authenticated callers",
        };
        f.debug_struct("AgentService")
            .field("limits", &self.limits)
            .field("free_run_slots", &self.runs.available_permits())
            .field("access", &access)
            .finish_non_exhaustive()
    }
}

impl AgentService {
    /// A service whose runs use agents built by `factory`, with the default [`Limits`].
    pub fn new(factory: impl AgentFactory) -> Self {
        let limits = Limits::default();
        AgentService {
            factory: Arc::new(factory),
            runs: Arc::new(Semaphore::new(limits.max_concurrent_runs)),
            limits,
            sessions: Arc::new(MemoryStore::new()),
            access: Access::LoopbackOnly,
        }
    }

    /// Who may call: every request of every router over this service is first given to
    /// `authenticator`, which names its [`Principal`](auth::Principal) or refuses it (each
    /// protocol answers a refusal its own way: see [`auth`]). What a caller makes (A2A tasks
    /// and contexts, MCP sessions and parked runs) is then its own; another caller is told
    /// "not found".
    ///
    /// Without an authenticator a service serves loopback peers only (see [`auth`]), all as
    /// one principal. A host whose own tower layer authenticates passes its principal on with
    /// [`auth::FromExtension`].
    ///
    /// ```
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::Agent;
    /// use agent_loop_serve::auth::{BearerTokens, Principal};
    /// use agent_loop_serve::AgentService;
    ///
    /// let service = AgentService::new(|| {
    ///     Agent::builder(ScriptedClient::new([ScriptedResponse::text("Hi!")]))
    /// })
    /// .authenticate(BearerTokens::new().token("s3cret", Principal::new("alice")));
    /// # drop(service);
    /// ```
    pub fn authenticate(mut self, authenticator: impl Authenticator) -> Self {
        self.access = Access::Authenticated(Arc::new(authenticator));
        self
    }

    /// Serves any caller, from any address, without authentication, all of them as the one
    /// principal [`Principal::local`](auth::Principal::local): they share every task,
    /// context and session. For a trusted network, or a host whose layer in front decides
    /// who gets through; replaces an [`authenticate`](Self::authenticate).
    pub fn allow_anonymous(mut self) -> Self {
        self.access = Access::Anyone;
        self
    }

    /// The store the conversations of stateful protocols (A2A's tasks) are kept in; a
    /// [`MemoryStore`] unless set. With a shared store (`agent_loop_sql`'s), a paused task
    /// can be answered through another process.
    pub fn sessions(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.sessions = store;
        self
    }

    /// These limits (replacing the run slots: set them before cloning the service).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self.runs = Arc::new(Semaphore::new(limits.max_concurrent_runs));
        self
    }

    /// The service's limits.
    pub fn current_limits(&self) -> Limits {
        self.limits
    }

    /// Who may call.
    #[cfg_attr(
        not(any(feature = "responses", feature = "mcp", feature = "a2a")),
        allow(dead_code)
    )]
    pub(crate) fn access(&self) -> &Access {
        &self.access
    }

    /// A run slot, or `None` when every slot is taken.
    pub(crate) fn try_run_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.runs.clone().try_acquire_owned().ok()
    }

    /// A new agent for one run.
    #[cfg_attr(not(any(feature = "responses", feature = "mcp")), allow(dead_code))]
    pub(crate) fn agent(&self) -> Result<Agent, Error> {
        self.factory.builder().build()
    }

    /// A new agent for one run whose conversation is the session `id` of the service's store.
    #[cfg_attr(not(feature = "a2a"), allow(dead_code))]
    pub(crate) fn agent_in_session(&self, id: &str) -> Result<Agent, Error> {
        self.factory
            .builder()
            .session(self.sessions.clone(), id)
            .build()
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
#[cfg_attr(not(feature = "responses"), allow(dead_code))]
pub(crate) fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[allow(unused_imports)]
pub(crate) use auth::fresh_id;
