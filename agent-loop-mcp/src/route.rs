//! Which of our tool calls a server's request (an elicitation, a sampling request) belongs to.
//!
//! The MCP spec has a server send `elicitation/create` and `sampling/createMessage` "nested
//! inside" the request it is serving, but puts no field on the wire that names that request.
//! Only the transport can tell:
//!
//! ```text
//!  streamable HTTP   the request arrives on the SSE stream of the POST that carried our
//!                    tools/call: rmcp marks it InboundStreamOrigin::OutboundRequest(id)
//!                    ─► that call. On the standalone GET stream (Unassociated) it belongs
//!                    to no call.
//!  stdio             no mark: the call is known only when exactly one tools/call is in
//!                    flight on the session; with none it belongs to no call, with several
//!                    it is ambiguous.
//! ```
//!
//! A request that belongs to no call, or to one we cannot tell, is refused (an elicitation
//! is declined): answering it on behalf of the wrong call would hand one call's question to
//! another call's host, and spend one run's budget on another's behalf.

// rmcp marks sampling deprecated (SEP-2577, from protocol 2026-07-28 on); servers on
// 2025-11-25, the revision this client speaks, still send it.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorData,
    Extensions, RequestId,
};
use rmcp::service::InboundStreamOrigin;
use tokio::sync::{mpsc, oneshot};

/// How many server requests may wait for one call at once (a server asks one thing at a time
/// in practice; more are refused).
const ASK_QUEUE: usize = 4;

/// A server's request, handed to the tool call it belongs to; the call answers on `reply`.
/// A call that ends without answering drops `reply`: the handler then answers for it
/// (an elicitation `cancel`, a sampling error).
pub(crate) enum ServerAsk {
    Elicit {
        params: ElicitRequestParams,
        reply: oneshot::Sender<ElicitResult>,
    },
    Sample {
        params: CreateMessageRequestParams,
        reply: oneshot::Sender<Result<CreateMessageResult, ErrorData>>,
    },
}

/// Where a server's request goes.
pub(crate) enum Route {
    /// To this call.
    Call(mpsc::Sender<ServerAsk>),
    /// It belongs to no tool call of ours.
    Outside,
    /// Several calls are in flight and the transport does not say which one it belongs to.
    Ambiguous(usize),
}

/// The tools/call requests in flight on one session, by request id (ids are the session's:
/// a new session starts them again, so each session has its own map).
#[derive(Default)]
pub(crate) struct InFlight {
    /// Held while a tools/call is sent and registered, and while a server request is
    /// routed: a server request for a call can never be routed before the call is
    /// registered, however fast the server answers.
    gate: tokio::sync::Mutex<()>,
    calls: Mutex<HashMap<RequestId, mpsc::Sender<ServerAsk>>>,
}

impl InFlight {
    /// Takes the gate for sending a call: register it with [`Gate::register`] before
    /// letting go.
    pub(crate) async fn gate(self: &Arc<Self>) -> Gate<'_> {
        Gate {
            in_flight: self,
            _guard: self.gate.lock().await,
        }
    }

    /// Where the request with these extensions goes.
    pub(crate) async fn route(&self, extensions: &Extensions) -> Route {
        let _gate = self.gate.lock().await;
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        match extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => match calls.get(id) {
                Some(tx) => Route::Call(tx.clone()),
                // Another request of ours (tools/list …), or a call that has ended.
                None => Route::Outside,
            },
            Some(InboundStreamOrigin::Unassociated) => Route::Outside,
            // The transport cannot tell (stdio).
            None => match calls.len() {
                0 => Route::Outside,
                1 => match calls.values().next() {
                    Some(tx) => Route::Call(tx.clone()),
                    None => Route::Outside,
                },
                n => Route::Ambiguous(n),
            },
        }
    }
}

/// The gate, held while one call is sent.
pub(crate) struct Gate<'a> {
    in_flight: &'a Arc<InFlight>,
    _guard: tokio::sync::MutexGuard<'a, ()>,
}

impl Gate<'_> {
    /// Registers the call just sent; the server's requests for it come out of the receiver
    /// until the registration is dropped.
    pub(crate) fn register(self, id: RequestId) -> (Registered, mpsc::Receiver<ServerAsk>) {
        let (tx, rx) = mpsc::channel(ASK_QUEUE);
        self.in_flight
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), tx);
        (
            Registered {
                in_flight: self.in_flight.clone(),
                id,
            },
            rx,
        )
    }
}

/// A call's place in [`InFlight`]; removed when dropped (the call got its answer, or was
/// given up).
pub(crate) struct Registered {
    in_flight: Arc<InFlight>,
    id: RequestId,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.in_flight
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(origin: Option<InboundStreamOrigin>) -> Extensions {
        let mut extensions = Extensions::new();
        if let Some(origin) = origin {
            extensions.insert(origin);
        }
        extensions
    }

    #[tokio::test]
    async fn a_request_goes_to_the_call_whose_stream_it_came_on() {
        let in_flight = Arc::new(InFlight::default());
        let (first, _rx1) = in_flight.gate().await.register(RequestId::Number(1));
        let (_second, _rx2) = in_flight.gate().await.register(RequestId::Number(2));
        let on = |id| {
            origin(Some(InboundStreamOrigin::OutboundRequest(
                RequestId::Number(id),
            )))
        };
        assert!(matches!(in_flight.route(&on(2)).await, Route::Call(_)));
        // A request of ours that is no call (or a call that ended), and the standalone
        // stream, belong to no call.
        assert!(matches!(in_flight.route(&on(7)).await, Route::Outside));
        let standalone = origin(Some(InboundStreamOrigin::Unassociated));
        assert!(matches!(in_flight.route(&standalone).await, Route::Outside));
        drop(first);
        assert!(matches!(in_flight.route(&on(1)).await, Route::Outside));
    }

    #[tokio::test]
    async fn without_a_mark_only_a_single_call_in_flight_is_certain() {
        let in_flight = Arc::new(InFlight::default());
        let unmarked = origin(None);
        assert!(matches!(in_flight.route(&unmarked).await, Route::Outside));
        let (first, mut rx1) = in_flight.gate().await.register(RequestId::Number(1));
        match in_flight.route(&unmarked).await {
            Route::Call(tx) => {
                let (reply, _answer) = oneshot::channel();
                let params = serde_json::from_value(serde_json::json!({
                    "message": "m", "requestedSchema": {"type": "object", "properties": {}}
                }))
                .unwrap();
                tx.try_send(ServerAsk::Elicit { params, reply })
                    .ok()
                    .unwrap();
                assert!(matches!(rx1.try_recv(), Ok(ServerAsk::Elicit { .. })));
            }
            _ => panic!("one call in flight"),
        }
        let (_second, _rx2) = in_flight.gate().await.register(RequestId::Number(2));
        assert!(matches!(
            in_flight.route(&unmarked).await,
            Route::Ambiguous(2)
        ));
        drop(first);
        assert!(matches!(in_flight.route(&unmarked).await, Route::Call(_)));
    }
}
