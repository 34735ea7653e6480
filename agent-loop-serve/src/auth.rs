//! Who is calling: an [`Authenticator`] turns a request's head (headers, peer address, the
//! extensions a host's tower layer set) into a [`Principal`] or a [`Refusal`].
//!
//! An [`AgentService`](crate::AgentService) takes one with
//! [`authenticate`](crate::AgentService::authenticate); every protocol's router then asks it
//! about every request before anything else is read, and refuses in the protocol's own way:
//!
//! | Router | Refused with |
//! |---|---|
//! | [`responses`](crate::responses) | 401 (403) and OpenAI's error body, `{"error": {"message", "type": "invalid_request_error", "code": "invalid_api_key"}}` |
//! | [`a2a`](crate::a2a) `POST /a2a` | 401 (403) and a JSON-RPC error body; the agent card stays public and declares the scheme (`securitySchemes`, `securityRequirements`) |
//! | [`mcp`](crate::mcp) (streamable HTTP) | 401 (403) with `WWW-Authenticate: Bearer …`, as the MCP authorization spec says |
//!
//! 401 carries `WWW-Authenticate: Bearer` everywhere. A request that passes carries its
//! [`Principal`] as a request extension, and what it makes (A2A tasks and contexts, MCP
//! sessions and parked runs) belongs to that principal: another principal is told "not
//! found", in the protocol's own error.
//!
//! Built in: [`BearerTokens`] (a fixed map of tokens to principals, compared in constant
//! time) and [`FromExtension`] (the principal a host's own tower layer put in the request's
//! extensions: OAuth, mTLS, a session cookie, anything).
//!
//! # With no authenticator
//!
//! A service with no authenticator serves **loopback peers only** (127.0.0.0/8, ::1), all of
//! them as the one principal [`Principal::local`]; any other peer is refused with 403, the
//! message saying to set an authenticator or to call
//! [`allow_anonymous`](crate::AgentService::allow_anonymous). The peer address is axum's
//! [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo): serve the router with
//! `into_make_service_with_connect_info::<SocketAddr>()`. A request whose peer is unknown
//! (served without it, or through `tower::ServiceExt::oneshot`) is taken as not loopback, and
//! refused with a message that says so. Behind a reverse proxy on the same host every peer is
//! loopback: set an authenticator there.
//!
//! ```
//! use agent_loop_serve::auth::{BearerTokens, Principal};
//!
//! let tokens = BearerTokens::new()
//!     .token("s3cret-for-alice", Principal::new("alice"))
//!     .token("s3cret-for-bob", Principal::new("bob").named("Bob's CI"));
//! assert_eq!(tokens.len(), 2);
//! // Debug never shows a token.
//! assert!(!format!("{tokens:?}").contains("s3cret"));
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};

/// Who made a request: an opaque id (what the server keys the caller's tasks, contexts and
/// sessions by) and, optionally, a name to show. Two principals are the same caller exactly
/// when their ids are equal.
///
/// ```
/// use agent_loop_serve::auth::Principal;
/// let alice = Principal::new("user-42").named("Alice");
/// assert_eq!(alice.id(), "user-42");
/// assert_eq!(alice.name(), Some("Alice"));
/// assert_eq!(alice, Principal::new("user-42"));
/// ```
#[derive(Debug, Clone, Eq)]
pub struct Principal {
    id: String,
    name: Option<String>,
}

impl PartialEq for Principal {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl std::hash::Hash for Principal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl Principal {
    /// The principal with this id.
    pub fn new(id: impl Into<String>) -> Self {
        Principal {
            id: id.into(),
            name: None,
        }
    }

    /// The principal every caller is when the service has no authenticator (a loopback peer,
    /// or anyone with [`allow_anonymous`](crate::AgentService::allow_anonymous)), and the MCP
    /// client of a stdio server: id `local`.
    pub fn local() -> Self {
        Principal::new("local")
    }

    /// This principal with a name to show.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its name, when it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// A key for this principal's things in a shared store: the hex SHA-256 of its id (fixed
    /// length, and no id can run into another's key: prefix a client-chosen name with it).
    ///
    /// ```
    /// use agent_loop_serve::auth::Principal;
    /// let key = Principal::new("alice").key_hex();
    /// assert_eq!(key.len(), 64);
    /// assert_ne!(key, Principal::new("bob").key_hex());
    /// ```
    pub fn key_hex(&self) -> String {
        hex(&Sha256::digest(self.id.as_bytes()))
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// No credentials, or ones that name nobody: HTTP 401, with `WWW-Authenticate`.
    Unauthenticated,
    /// The caller is known (or its address is) but may not use this server: HTTP 403.
    Forbidden,
}

/// A request refused by an [`Authenticator`]: why, and a message for the caller (it must not
/// hold the credentials tried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    kind: RefusalKind,
    message: String,
}

impl Refusal {
    /// A 401: no credentials, or unknown ones.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Refusal {
            kind: RefusalKind::Unauthenticated,
            message: message.into(),
        }
    }

    /// A 403: the caller may not use this server.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Refusal {
            kind: RefusalKind::Forbidden,
            message: message.into(),
        }
    }

    /// Why.
    pub fn kind(&self) -> RefusalKind {
        self.kind
    }

    /// What the caller is told.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status: 401 or 403.
    pub fn status(&self) -> axum::http::StatusCode {
        match self.kind {
            RefusalKind::Unauthenticated => axum::http::StatusCode::UNAUTHORIZED,
            RefusalKind::Forbidden => axum::http::StatusCode::FORBIDDEN,
        }
    }

    /// The `WWW-Authenticate` value of a 401 (RFC 6750), `None` for a 403.
    pub(crate) fn www_authenticate(&self) -> Option<HeaderValue> {
        if self.kind != RefusalKind::Unauthenticated {
            return None;
        }
        // The message goes in a quoted-string: keep it to printable ASCII without quotes.
        let description: String = self
            .message
            .chars()
            .map(|c| match c {
                ' '..='~' if c != '"' && c != '\\' => c,
                _ => ' ',
            })
            .collect();
        let value = format!("Bearer error=\"invalid_token\", error_description=\"{description}\"");
        HeaderValue::from_str(&value)
            .ok()
            .or_else(|| Some(HeaderValue::from_static("Bearer")))
    }
}

/// Decides who made a request, from its head: headers, URI, and extensions (the peer
/// address is [`peer_addr`]; a host's tower layer in front may have put its own findings
/// there). Implemented by [`BearerTokens`] and [`FromExtension`]; implement it for a JWT
/// check, an API-key database, or anything else.
///
/// ```
/// use agent_loop_serve::auth::{Authenticator, Principal, Refusal};
/// use axum::http::request::Parts;
///
/// /// Callers name themselves in `x-team` (only behind a proxy that sets it!).
/// struct TeamHeader;
///
/// #[async_trait::async_trait]
/// impl Authenticator for TeamHeader {
///     async fn authenticate(&self, request: &Parts) -> Result<Principal, Refusal> {
///         match request.headers.get("x-team").and_then(|v| v.to_str().ok()) {
///             Some(team) => Ok(Principal::new(team)),
///             None => Err(Refusal::unauthenticated("send the x-team header")),
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The caller of `request`, or why it is refused.
    async fn authenticate(&self, request: &Parts) -> Result<Principal, Refusal>;
}

/// The peer address of a request served with
/// `into_make_service_with_connect_info::<SocketAddr>()`; `None` otherwise.
pub fn peer_addr(request: &Parts) -> Option<SocketAddr> {
    request
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Bearer tokens, each naming a principal: `Authorization: Bearer <token>`.
///
/// The tokens are kept as SHA-256 digests, and a presented token's digest is compared with
/// every one in constant time (no early exit, no lookup keyed by it), so neither the answer's
/// timing nor a memory dump gives a token away. Debug shows how many there are, nothing more.
/// For tokens that change at run time, implement [`Authenticator`] over your own store.
#[derive(Clone, Default)]
pub struct BearerTokens {
    tokens: Vec<([u8; 32], Principal)>,
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokens")
            .field("tokens", &self.tokens.len())
            .finish()
    }
}

impl BearerTokens {
    /// No tokens yet (every request refused).
    pub fn new() -> Self {
        BearerTokens::default()
    }

    /// Adds `token` for `principal` (a second principal for the same token replaces the
    /// first).
    pub fn token(mut self, token: impl AsRef<str>, principal: Principal) -> Self {
        let digest: [u8; 32] = Sha256::digest(token.as_ref().as_bytes()).into();
        self.tokens.retain(|(d, _)| *d != digest);
        self.tokens.push((digest, principal));
        self
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The principal of `token`, looked up in constant time.
    pub fn principal_of(&self, token: &str) -> Option<&Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (known, principal) in &self.tokens {
            if constant_time_eq(known, &digest) {
                found = Some(principal);
            }
        }
        found
    }
}

/// Whether `a` and `b` are equal, in time that does not depend on where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // black_box: the compiler may not turn the fold back into an early-exit compare.
    std::hint::black_box(diff) == 0
}

#[async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, Refusal> {
        let Some(token) = bearer_token(&request.headers) else {
            return Err(Refusal::unauthenticated(
                "this server needs a bearer token: send `Authorization: Bearer <token>`",
            ));
        };
        self.principal_of(token)
            .cloned()
            .ok_or_else(|| Refusal::unauthenticated("the bearer token is not known here"))
    }
}

/// The [`Principal`] a host's own tower layer put in the request's extensions (its OAuth,
/// mTLS or cookie check, run in front of the router); a request without one is refused with
/// 401. The layer runs first, so it can also refuse on its own terms.
///
/// ```
/// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
/// use agent_loop::Agent;
/// use agent_loop_serve::auth::{FromExtension, Principal};
/// use agent_loop_serve::AgentService;
/// use axum::extract::Request;
/// use axum::middleware::{self, Next};
///
/// let service = AgentService::new(|| {
///     Agent::builder(ScriptedClient::new([ScriptedResponse::text("Hi!")]))
/// })
/// .authenticate(FromExtension);
/// // The host's layer: here it trusts a header set by its gateway.
/// async fn gateway(mut request: Request, next: Next) -> axum::response::Response {
///     if let Some(user) = request.headers().get("x-gateway-user").and_then(|v| v.to_str().ok()) {
///         let principal = Principal::new(user.to_owned());
///         request.extensions_mut().insert(principal);
///     }
///     next.run(request).await
/// }
/// let router = agent_loop_serve::responses::router(&service)
///     .layer(middleware::from_fn(gateway));
/// # drop(router);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FromExtension;

#[async_trait]
impl Authenticator for FromExtension {
    async fn authenticate(&self, request: &Parts) -> Result<Principal, Refusal> {
        request
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| {
                Refusal::unauthenticated(
                    "no principal: the host's authentication layer in front of this router found \
                 no caller",
                )
            })
    }
}

/// Who may call a service.
#[derive(Clone)]
pub(crate) enum Access {
    /// No authenticator: loopback peers only, as [`Principal::local`].
    LoopbackOnly,
    /// Anyone, as [`Principal::local`] (the host's explicit choice).
    Anyone,
    /// Whoever the authenticator names.
    Authenticated(Arc<dyn Authenticator>),
}

impl Access {
    /// The caller of `request`, or why it is refused.
    pub(crate) async fn identify(&self, request: &Parts) -> Result<Principal, Refusal> {
        match self {
            Access::Anyone => Ok(Principal::local()),
            Access::Authenticated(authenticator) => authenticator.authenticate(request).await,
            Access::LoopbackOnly => match peer_addr(request) {
                // `to_canonical`: a dual-stack listener sees 127.0.0.1 as ::ffff:127.0.0.1.
                Some(addr) if addr.ip().to_canonical().is_loopback() => Ok(Principal::local()),
                Some(addr) => Err(Refusal::forbidden(format!(
                    "this server has no authenticator, so it serves loopback callers only, and \
                     {} is not one: the host must set one (AgentService::authenticate, e.g. \
                     with BearerTokens) or allow anyone explicitly \
                     (AgentService::allow_anonymous)",
                    addr.ip()
                ))),
                None => Err(Refusal::forbidden(
                    "this server has no authenticator, so it serves loopback callers only, and \
                     it cannot see this caller's address: the host must serve the router with \
                     into_make_service_with_connect_info::<SocketAddr>(), set an authenticator \
                     (AgentService::authenticate), or allow anyone explicitly \
                     (AgentService::allow_anonymous)",
                )),
            },
        }
    }
}

/// `router`'s routes behind the caller check: each request's caller identified and its
/// [`Principal`] put in the request's extensions, or the request answered with `refuse`'s
/// response (and `WWW-Authenticate` on a 401).
pub(crate) fn guard<S>(
    router: axum::Router<S>,
    access: Access,
    refuse: fn(&Refusal) -> axum::response::Response,
) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    router.route_layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let access = access.clone();
            async move {
                let (mut parts, body) = request.into_parts();
                match access.identify(&parts).await {
                    Ok(principal) => {
                        parts.extensions.insert(principal);
                        next.run(axum::extract::Request::from_parts(parts, body))
                            .await
                    }
                    Err(refusal) => {
                        let mut response = refuse(&refusal);
                        if let Some(value) = refusal.www_authenticate() {
                            response
                                .headers_mut()
                                .insert(header::WWW_AUTHENTICATE, value);
                        }
                        response
                    }
                }
            }
        },
    ))
}

/// `router`'s routes behind `authenticator`, for routes of your own or of another crate (the
/// chat handlers of `agent-loop-ui`, `agui::respond` and `ai_sdk::respond`, and their
/// reconnect routes): each request's [`Principal`] is put in its extensions (read it with
/// `Extension<Principal>`), and a refused one gets 401 (or 403) with
/// `WWW-Authenticate: Bearer …` and `{"error": {"message", "type": "authentication_error"}}`.
///
/// Key what a caller names by its principal too: a chat's session id that the client chooses
/// (`useChat`'s `id`, AG-UI's `threadId`) must not reach another caller's conversation, so
/// make the store key from both, e.g. `format!("{}:{chat_id}", principal.key_hex())`.
///
/// ```
/// use agent_loop_serve::auth::{self, BearerTokens, Principal};
/// use axum::routing::post;
/// use axum::{Extension, Router};
///
/// async fn chat(Extension(caller): Extension<Principal>) -> String {
///     format!("hello, {}", caller.id())
/// }
/// let tokens = BearerTokens::new().token("s3cret", Principal::new("alice"));
/// let router: Router = auth::require(Router::new().route("/api/chat", post(chat)), tokens);
/// # drop(router);
/// ```
pub fn require<S>(router: axum::Router<S>, authenticator: impl Authenticator) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    guard(
        router,
        Access::Authenticated(Arc::new(authenticator)),
        refused,
    )
}

/// The refusal of [`require`]'s routes.
fn refused(refusal: &Refusal) -> axum::response::Response {
    use axum::response::IntoResponse;
    let kind = match refusal.kind() {
        RefusalKind::Unauthenticated => "authentication_error",
        _ => "permission_error",
    };
    let body = serde_json::json!({"error": {"message": refusal.message(), "type": kind}});
    (refusal.status(), axum::Json(body)).into_response()
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A fresh id with `prefix`: 128 bits from the operating system's CSPRNG, in hex. Ids name
/// tasks, contexts and parked runs that only their principal may reach; being unguessable is
/// a second wall behind that check.
pub(crate) fn fresh_id(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // The OS gave no randomness (nearly never happens): std's randomly keyed hashers,
        // over a counter and the clock, are the fallback.
        use std::hash::BuildHasher;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let a = std::collections::hash_map::RandomState::new().hash_one((n, nanos));
        let b = std::collections::hash_map::RandomState::new().hash_one((a, n, nanos));
        bytes[..8].copy_from_slice(&a.to_le_bytes());
        bytes[8..].copy_from_slice(&b.to_le_bytes());
    }
    format!("{prefix}{}", hex(&bytes))
}

/// A map from an id to the principal that made it, at most `cap` entries (the oldest forgotten
/// first: a forgotten id then belongs to nobody, and is refused to all).
#[derive(Debug)]
#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
pub(crate) struct Owners {
    cap: usize,
    owners: HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

#[cfg_attr(not(feature = "mcp"), allow(dead_code))]
impl Owners {
    pub(crate) fn new(cap: usize) -> Self {
        Owners {
            cap: cap.max(1),
            owners: HashMap::new(),
            order: std::collections::VecDeque::new(),
        }
    }

    /// Records that `principal` made `id`; gives the ids forgotten to make room.
    pub(crate) fn insert(&mut self, id: String, principal: &Principal) -> Vec<String> {
        let mut forgotten = Vec::new();
        if self.owners.contains_key(&id) {
            return forgotten;
        }
        while self.owners.len() >= self.cap {
            match self.order.pop_front() {
                Some(old) => {
                    self.owners.remove(&old);
                    forgotten.push(old);
                }
                None => break,
            }
        }
        self.order.push_back(id.clone());
        self.owners.insert(id, principal.id().to_owned());
        forgotten
    }

    /// Whether `id` was made by `principal`.
    pub(crate) fn is_owned_by(&self, id: &str, principal: &Principal) -> bool {
        self.owners.get(id).is_some_and(|p| p == principal.id())
    }

    /// Forgets `id`.
    pub(crate) fn remove(&mut self, id: &str) {
        if self.owners.remove(id).is_some() {
            self.order.retain(|o| o != id);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.owners.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)], peer: Option<&str>) -> Parts {
        let mut request = axum::http::Request::builder().uri("/x");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        if let Some(peer) = peer {
            let addr: SocketAddr = peer.parse().unwrap();
            parts.extensions.insert(ConnectInfo(addr));
        }
        parts
    }

    #[tokio::test]
    async fn bearer_tokens_name_their_principals_and_refuse_the_rest() {
        let tokens = BearerTokens::new()
            .token("tok-a", Principal::new("a"))
            .token("tok-b", Principal::new("b"));
        let who = |h: &'static str| {
            let tokens = tokens.clone();
            async move {
                tokens
                    .authenticate(&parts(&[("authorization", h)], None))
                    .await
            }
        };
        assert_eq!(who("Bearer tok-a").await.unwrap().id(), "a");
        assert_eq!(who("bearer tok-b").await.unwrap().id(), "b");
        for bad in [
            "Bearer tok-c",
            "Bearer tok-a ",
            "Basic tok-a",
            "Bearer",
            "tok-a",
            "",
        ] {
            let refusal = who(bad).await;
            if bad == "Bearer tok-a " {
                // Surrounding spaces are not part of the token.
                assert_eq!(refusal.unwrap().id(), "a");
                continue;
            }
            let refusal = refusal.unwrap_err();
            assert_eq!(refusal.kind(), RefusalKind::Unauthenticated, "{bad}");
            assert!(!refusal.message().contains("tok-"), "{refusal}");
        }
        let none = tokens.authenticate(&parts(&[], None)).await.unwrap_err();
        assert!(none.message().contains("Authorization: Bearer"));
        // A token given again names its new principal.
        let again = tokens.token("tok-a", Principal::new("a2"));
        assert_eq!(again.len(), 2);
        assert_eq!(again.principal_of("tok-a").unwrap().id(), "a2");
    }

    #[tokio::test]
    async fn without_an_authenticator_only_loopback_peers_are_served() {
        let access = Access::LoopbackOnly;
        for peer in [
            "127.0.0.1:5000",
            "[::1]:5000",
            "127.8.9.10:1",
            "[::ffff:127.0.0.1]:5000",
        ] {
            let principal = access.identify(&parts(&[], Some(peer))).await.unwrap();
            assert_eq!(principal, Principal::local(), "{peer}");
        }
        for peer in [
            Some("10.0.0.2:5000"),
            Some("[2001:db8::1]:80"),
            Some("[::ffff:10.0.0.2]:80"),
            None,
        ] {
            let refusal = access.identify(&parts(&[], peer)).await.unwrap_err();
            assert_eq!(refusal.kind(), RefusalKind::Forbidden);
            assert!(
                refusal.message().contains("AgentService::authenticate")
                    && refusal.message().contains("allow_anonymous"),
                "{refusal}"
            );
        }
        let unknown = access.identify(&parts(&[], None)).await.unwrap_err();
        assert!(unknown
            .message()
            .contains("into_make_service_with_connect_info"));
        let anyone = Access::Anyone;
        assert!(anyone
            .identify(&parts(&[], Some("10.0.0.2:1")))
            .await
            .is_ok());
    }

    #[test]
    fn fresh_ids_are_128_random_bits() {
        let a = fresh_id("task-");
        let b = fresh_id("task-");
        assert_ne!(a, b);
        assert_eq!(a.len(), "task-".len() + 32);
        assert!(a["task-".len()..].bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn the_www_authenticate_header_is_always_valid() {
        let refusal = Refusal::unauthenticated("bad \"token\"\n\u{e9}");
        let value = refusal.www_authenticate().unwrap();
        assert_eq!(
            value.to_str().unwrap(),
            "Bearer error=\"invalid_token\", error_description=\"bad  token   \""
        );
        assert!(Refusal::forbidden("no").www_authenticate().is_none());
    }

    #[test]
    fn owners_are_bounded_and_an_evicted_id_belongs_to_nobody() {
        let (a, b) = (Principal::new("a"), Principal::new("b"));
        let mut owners = Owners::new(2);
        assert!(owners.insert("s1".into(), &a).is_empty());
        assert!(owners.insert("s2".into(), &b).is_empty());
        assert!(owners.is_owned_by("s1", &a) && !owners.is_owned_by("s1", &b));
        assert_eq!(owners.insert("s3".into(), &a), vec!["s1".to_owned()]);
        assert_eq!(owners.len(), 2);
        assert!(!owners.is_owned_by("s1", &a));
        owners.remove("s2");
        assert!(!owners.is_owned_by("s2", &b));
    }
}
