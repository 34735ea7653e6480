//! One `tools/call` in flight: its pending answer, its progress token, the queue of the
//! server's requests that belong to it, and the guard that cancels it when it is given up.
//! A [`Flight`] outlives the tool call that started it when the call pauses for an
//! elicitation (it waits in `Parked`), and the re-run of the call takes it up again.

use std::future::Future;
use std::pin::Pin;

use rmcp::handler::client::progress::ProgressSubscriber;
use rmcp::model::{CancelledNotificationParam, ProgressToken, RequestId, ServerResult};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::mpsc;

use crate::route::{Registered, ServerAsk};

/// The pending answer of a `tools/call`.
pub(crate) type Response =
    Pin<Box<dyn Future<Output = Result<ServerResult, ServiceError>> + Send + 'static>>;

/// A `tools/call` in flight. Dropping it cancels the call (`notifications/cancelled`) unless
/// its answer came.
pub(crate) struct Flight {
    pub(crate) response: Response,
    pub(crate) progress_token: ProgressToken,
    /// The subscription to the call's progress notes while a tool call drives the flight;
    /// `None` while it waits (notes that come then are dropped, so none pile up).
    pub(crate) progress: Option<ProgressSubscriber>,
    /// The server's requests that belong to this call.
    pub(crate) asks: mpsc::Receiver<ServerAsk>,
    pub(crate) _registered: Registered,
    pub(crate) cancel: CancelOnDrop,
}

/// Sends `notifications/cancelled` for a request whose caller stopped waiting.
pub(crate) struct CancelOnDrop {
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) id: Option<RequestId>,
}

impl CancelOnDrop {
    /// The answer came: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let reason =
                "cancelled by the agent (run cancelled, tool timeout, or a question left unanswered)"
                    .to_owned();
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(reason)))
                .await;
        });
    }
}
