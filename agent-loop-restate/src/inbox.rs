//! What a host tells a durable run while it goes: its words (steering) and a request to stop
//! after the turn, kept for the session's run to read at its safe points.
//!
//! # Why an object of its own
//!
//! The run holds the `AgentSession` object's exclusive lock, and only exclusive handlers may
//! write a virtual object's state (Restate's shared handlers read it only: the SDK gives them
//! no `set`). So a host's words cannot go into the session's own state while its run goes on.
//! They go into the `AgentInbox` object of the same key instead, whose handlers are exclusive
//! and short (a read and a write): `AgentSession`'s shared `steer` and `stopAfterTurn`
//! handlers call it, and the run calls its `take` handler at each safe point. The call is
//! journaled, so a replay of the run (after a crash) is fed the same words at the same
//! points. An awakeable would not do: a run cannot look at one without waiting for it.
//! The object is private to the server (`ingress_private`): hosts use the session's handlers.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

/// The name of the inbox object (keyed by session id).
pub(crate) const INBOX_NAME: &str = "AgentInbox";
/// The queued words: a JSON array of strings, oldest first.
const QUEUE: &str = "queue";
/// Whether the next (or current) run is asked to stop after its turn.
const STOP: &str = "stop";
/// The most inputs queued at once; a steer past it is refused (429).
pub(crate) const MAX_QUEUED: usize = 16;
/// The longest input (bytes of its text); a longer one is refused (413).
pub(crate) const MAX_INPUT_BYTES: usize = 64 * 1024;

/// What the run takes from the inbox at a safe point: the words in order, and whether it is
/// asked to stop after its turn.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Inbox {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_after_turn: bool,
}

/// Why a steer is refused, if it is: empty, too long (the host's request is untrusted).
pub(crate) fn check_input(text: &str) -> Result<(), TerminalError> {
    if text.trim().is_empty() {
        return Err(TerminalError::new_with_code(
            400,
            "a steer needs some text (a JSON string)",
        ));
    }
    if text.len() > MAX_INPUT_BYTES {
        return Err(TerminalError::new_with_code(
            413,
            format!(
                "a steer is {} bytes, over the {MAX_INPUT_BYTES} one may be",
                text.len()
            ),
        ));
    }
    Ok(())
}

pub(crate) struct AgentInbox;

#[restate_sdk::object(name = "AgentInbox", ingress_private = true)]
impl AgentInbox {
    /// Queues the host's words after the others.
    #[handler]
    async fn steer(&self, ctx: ObjectContext<'_>, Json(text): Json<String>) -> HandlerResult<()> {
        check_input(&text)?;
        let mut queue = ctx
            .get::<Json<Vec<String>>>(QUEUE)
            .await?
            .map_or_else(Vec::new, |Json(q)| q);
        if queue.len() >= MAX_QUEUED {
            return Err(TerminalError::new_with_code(
                429,
                format!("{MAX_QUEUED} steers already wait for the run's next safe point"),
            )
            .into());
        }
        queue.push(text);
        ctx.set(QUEUE, Json(queue));
        Ok(())
    }

    /// Asks the run in flight (or the next one) to stop after its turn.
    #[handler(name = "stopAfterTurn")]
    async fn stop_after_turn(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        ctx.set(STOP, true);
        Ok(())
    }

    /// Everything queued, cleared: the run's read at a safe point.
    #[handler]
    async fn take(&self, ctx: ObjectContext<'_>) -> HandlerResult<Json<Inbox>> {
        let inputs = ctx
            .get::<Json<Vec<String>>>(QUEUE)
            .await?
            .map_or_else(Vec::new, |Json(q)| q);
        let stop_after_turn = ctx.get::<bool>(STOP).await?.unwrap_or(false);
        if !inputs.is_empty() {
            ctx.clear(QUEUE);
        }
        if stop_after_turn {
            ctx.clear(STOP);
        }
        Ok(Json(Inbox {
            inputs,
            stop_after_turn,
        }))
    }

    /// Puts words a run took but could not hand back (Restate cancelled it, or it failed)
    /// back in front of the queue, for the next run: nothing typed is lost.
    #[handler(name = "putBack")]
    async fn put_back(
        &self,
        ctx: ObjectContext<'_>,
        Json(mut inputs): Json<Vec<String>>,
    ) -> HandlerResult<()> {
        let queue = ctx
            .get::<Json<Vec<String>>>(QUEUE)
            .await?
            .map_or_else(Vec::new, |Json(q)| q);
        // Each came through `steer`, and a run holds at most a few takes' worth.
        inputs.truncate(4 * MAX_QUEUED);
        inputs.extend(queue);
        ctx.set(QUEUE, Json(inputs));
        Ok(())
    }
}
