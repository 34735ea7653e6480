//! Streams that survive a reconnect: each SSE frame a run sends carries a sequence id
//! (`id: 7`), the run's frames are kept in a bounded per-run [`ReplayBuffer`], and with the
//! feature `axum` a [`RunStreams`] registry runs each run on a task of its own, so a client
//! that went away (a reload, a sleeping tab, a proxy that cut the stream) can come back with
//! `Last-Event-ID` and get what it missed, then the live stream, each frame once. A run whose
//! clients are all gone is cancelled after a grace time ([`RunStreams::grace`]).
//!
//! ```text
//!  agent events ─► encoder ─► frames ─► pump task ─► ReplayBuffer (ids 1, 2, 3 …, bounded)
//!                                            │              │
//!                                            │   client 1 ◄─┤ (from id 1, live)
//!                                            │   client 2 ◄─┘ (Last-Event-ID: 2 → 3, 4 … live)
//!                                            └─ no client for the grace time: cancel the run
//! ```

use std::collections::VecDeque;

use bytes::Bytes;

/// How much of a run a [`ReplayBuffer`] keeps: at most `events` frames and `bytes` bytes of
/// them (the newest frame is always kept, whatever its size). The oldest go first.
///
/// ```
/// use agent_loop_ui::ReplayLimits;
///
/// let limits = ReplayLimits::default().events(1_000).bytes(1 << 20);
/// assert_eq!((limits.max_events(), limits.max_bytes()), (1_000, 1 << 20));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    events: usize,
    bytes: usize,
}

impl Default for ReplayLimits {
    /// 10,000 frames and 8 MiB: a long answer with many tool calls.
    fn default() -> Self {
        ReplayLimits {
            events: 10_000,
            bytes: 8 << 20,
        }
    }
}

impl ReplayLimits {
    /// At most this many frames (at least 1).
    pub fn events(mut self, events: usize) -> Self {
        self.events = events.max(1);
        self
    }

    /// At most this many bytes of frames.
    pub fn bytes(mut self, bytes: usize) -> Self {
        self.bytes = bytes;
        self
    }

    /// The frame limit.
    pub fn max_events(&self) -> usize {
        self.events
    }

    /// The byte limit.
    pub fn max_bytes(&self) -> usize {
        self.bytes
    }
}

/// Why a client's reconnect cannot be served.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The frames after `last_seen` are no longer kept (the buffer's bound): the client must
    /// load the conversation afresh. Answered `410 Gone`.
    #[error(
        "the events after id {last_seen} are no longer kept (the oldest kept is {oldest}): \
         load the conversation again"
    )]
    Evicted {
        /// The id the client saw last (0: none).
        last_seen: u64,
        /// The oldest id kept.
        oldest: u64,
    },
    /// The client names an id this run never sent (or not a number). Answered `400`.
    #[error("no event {last_seen:?} was sent in this run (the last is {last})")]
    UnknownId {
        /// What the client sent.
        last_seen: String,
        /// The last id sent.
        last: u64,
    },
    /// No run is kept under that name. Answered `404` (the AI SDK's reconnect: `204`).
    #[error("no run of {0:?} is kept")]
    NoRun(String),
}

/// A run's SSE frames, numbered and kept for clients that reconnect; sans-IO and bounded
/// ([`ReplayLimits`]).
///
/// Ids start at 1 and follow each other; a client that saw id `n` gets `n + 1` onwards, one
/// that saw nothing (0) gets all, and one whose next frame was dropped by the bound gets
/// [`ReplayError::Evicted`].
///
/// ```
/// use agent_loop_ui::{ReplayBuffer, ReplayError, ReplayLimits};
///
/// let mut buffer = ReplayBuffer::new(ReplayLimits::default().events(2));
/// for text in ["a", "b", "c"] {
///     buffer.push(format!("data: {text}\n\n").as_bytes());
/// }
/// let after_2: Vec<_> = buffer.after(2).unwrap().into_iter().map(|(id, _)| id).collect();
/// assert_eq!(after_2, [3]);
/// assert_eq!(&buffer.after(2).unwrap()[0].1[..], b"id: 3\ndata: c\n\n");
/// assert_eq!(buffer.after(0), Err(ReplayError::Evicted { last_seen: 0, oldest: 2 }));
/// ```
#[derive(Debug, Clone)]
pub struct ReplayBuffer {
    /// The kept frames, ids consecutive, oldest first, each with its `id:` line.
    frames: VecDeque<(u64, Bytes)>,
    /// The id of the last frame pushed (0 before the first).
    last: u64,
    /// The bytes of `frames`.
    bytes: usize,
    limits: ReplayLimits,
}

impl ReplayBuffer {
    /// An empty buffer.
    pub fn new(limits: ReplayLimits) -> Self {
        ReplayBuffer {
            frames: VecDeque::new(),
            last: 0,
            bytes: 0,
            limits,
        }
    }

    /// Numbers one SSE frame (`data: …\n\n`), keeps it, drops the oldest beyond the limits,
    /// and gives the frame as sent: `id: {n}\n` before it.
    pub fn push(&mut self, frame: &[u8]) -> Bytes {
        self.last += 1;
        let framed = with_id(self.last, frame);
        self.bytes += framed.len();
        self.frames.push_back((self.last, framed.clone()));
        while self.frames.len() > 1
            && (self.frames.len() > self.limits.events || self.bytes > self.limits.bytes)
        {
            if let Some((_, old)) = self.frames.pop_front() {
                self.bytes -= old.len();
            }
        }
        framed
    }

    /// The id of the last frame pushed (0 before the first).
    pub fn last_id(&self) -> u64 {
        self.last
    }

    /// The frames after id `last_seen` (0: all of the run), with their ids.
    pub fn after(&self, last_seen: u64) -> Result<Vec<(u64, Bytes)>, ReplayError> {
        if last_seen > self.last {
            return Err(ReplayError::UnknownId {
                last_seen: last_seen.to_string(),
                last: self.last,
            });
        }
        let oldest = self.frames.front().map_or(self.last + 1, |(id, _)| *id);
        if last_seen + 1 < oldest {
            return Err(ReplayError::Evicted { last_seen, oldest });
        }
        let skip = usize::try_from(last_seen + 1 - oldest).unwrap_or(usize::MAX);
        Ok(self.frames.iter().skip(skip).cloned().collect())
    }

    /// [`after`](ReplayBuffer::after) with the id as a client sends it (`Last-Event-ID`):
    /// `None` or empty is 0.
    pub fn after_header(
        &self,
        last_event_id: Option<&str>,
    ) -> Result<Vec<(u64, Bytes)>, ReplayError> {
        self.after(parse_id(last_event_id, self.last)?)
    }
}

/// The id a client sent, as a number.
pub(crate) fn parse_id(last_event_id: Option<&str>, last: u64) -> Result<u64, ReplayError> {
    match last_event_id.map(str::trim) {
        None | Some("") => Ok(0),
        Some(text) => text.parse().map_err(|_| ReplayError::UnknownId {
            last_seen: text.chars().take(40).collect(),
            last,
        }),
    }
}

/// `frame` with the line `id: {id}` before it.
pub(crate) fn with_id(id: u64, frame: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(frame.len() + 24);
    out.extend_from_slice(format!("id: {id}\n").as_bytes());
    out.extend_from_slice(frame);
    Bytes::from(out)
}

#[cfg(feature = "axum")]
pub use live::RunStreams;

#[cfg(feature = "axum")]
mod live {
    use std::collections::HashMap;
    use std::fmt;
    use std::sync::{Arc, Mutex, MutexGuard};
    use std::time::Duration;

    use agent_loop::agent::AgentHandle;
    use agent_loop::UserInput;
    use bytes::Bytes;
    use futures::{Stream, StreamExt};
    use tokio::sync::watch;

    use super::{parse_id, ReplayBuffer, ReplayError, ReplayLimits};

    /// The runs a server streams, kept so that their clients can reconnect: give it to the
    /// handlers with [`RespondOptions::resumable`](crate::RespondOptions::resumable), and
    /// answer reconnects with [`ai_sdk::reconnect`](crate::ai_sdk::reconnect) and
    /// [`agui::reconnect`](crate::agui::reconnect). One per server (it is a cheap handle:
    /// clones share the runs).
    ///
    /// Each run is driven by a task of its own, not by its response: the run goes on when
    /// its client goes away, and is cancelled (as [`AgentHandle::cancel`] does, so it ends
    /// with `Finished`, kept for the clients) when no client has followed it for the
    /// [grace time](RunStreams::grace). A chat keeps one run (a new run of the same chat
    /// replaces the old one); at most [`max_runs`](RunStreams::max_runs) are kept, the
    /// oldest finished ones dropped first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_loop_ui::{ReplayLimits, RespondOptions, RunStreams};
    ///
    /// let streams = RunStreams::new()
    ///     .grace(Duration::from_secs(60))
    ///     .limits(ReplayLimits::default().events(5_000))
    ///     .max_runs(500);
    /// let options = RespondOptions::new().resumable(streams.clone());
    /// # drop(options);
    /// ```
    #[derive(Clone)]
    pub struct RunStreams {
        inner: Arc<Registry>,
    }

    struct Registry {
        runs: Mutex<HashMap<String, Arc<Run>>>,
        limits: ReplayLimits,
        grace: Duration,
        max_runs: usize,
        started: std::sync::atomic::AtomicU64,
    }

    /// One run's frames and who follows them.
    struct Run {
        /// The protocol's run id (AG-UI's `runId`; the AI SDK's chat has none: empty).
        run_id: String,
        /// When it started, in the registry's count (the oldest finished go first).
        number: u64,
        state: Mutex<RunState>,
        /// Bumped at each frame and at the end.
        changed: watch::Sender<()>,
        /// How many clients follow the run.
        watchers: watch::Sender<usize>,
        /// Cancels the run.
        handle: AgentHandle,
    }

    struct RunState {
        buffer: ReplayBuffer,
        finished: bool,
    }

    fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(|e| e.into_inner())
    }

    impl fmt::Debug for RunStreams {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("RunStreams")
                .field("runs", &lock(&self.inner.runs).len())
                .field("limits", &self.inner.limits)
                .field("grace", &self.inner.grace)
                .field("max_runs", &self.inner.max_runs)
                .finish()
        }
    }

    /// Two handles are equal when they share their runs.
    impl PartialEq for RunStreams {
        fn eq(&self, other: &Self) -> bool {
            Arc::ptr_eq(&self.inner, &other.inner)
        }
    }

    impl Eq for RunStreams {}

    impl Default for RunStreams {
        fn default() -> Self {
            RunStreams::new()
        }
    }

    impl RunStreams {
        /// No runs yet; a grace time of 30 s, [`ReplayLimits::default`], 1,000 runs.
        pub fn new() -> Self {
            RunStreams::with(ReplayLimits::default(), Duration::from_secs(30), 1_000)
        }

        fn with(limits: ReplayLimits, grace: Duration, max_runs: usize) -> Self {
            RunStreams {
                inner: Arc::new(Registry {
                    runs: Mutex::new(HashMap::new()),
                    limits,
                    grace,
                    max_runs: max_runs.max(1),
                    started: std::sync::atomic::AtomicU64::new(0),
                }),
            }
        }

        /// How long a run goes on with no client following it before it is cancelled (set
        /// it before cloning the handle: it makes a new registry).
        pub fn grace(self, grace: Duration) -> Self {
            RunStreams::with(self.inner.limits, grace, self.inner.max_runs)
        }

        /// How much of each run is kept for reconnects (set it before cloning the handle).
        pub fn limits(self, limits: ReplayLimits) -> Self {
            RunStreams::with(limits, self.inner.grace, self.inner.max_runs)
        }

        /// How many runs are kept at most (set it before cloning the handle).
        pub fn max_runs(self, max_runs: usize) -> Self {
            RunStreams::with(self.inner.limits, self.inner.grace, max_runs)
        }

        /// Whether the run kept under `key` (a chat's or thread's id) is still going.
        pub fn is_live(&self, key: &str) -> bool {
            self.run(key).is_some_and(|run| !lock(&run.state).finished)
        }

        /// How many clients follow the run kept under `key` now.
        pub fn watchers(&self, key: &str) -> usize {
            self.run(key).map_or(0, |run| *run.watchers.borrow())
        }

        /// Waits until the run kept under `key` has ended (at once when none is kept).
        pub async fn finished(&self, key: &str) {
            let Some(run) = self.run(key) else { return };
            let mut changed = run.changed.subscribe();
            while !lock(&run.state).finished {
                if changed.changed().await.is_err() {
                    return;
                }
            }
        }

        /// Cancels the run kept under `key` (a Stop button: with resumable streams, a client
        /// that goes away no longer stops its run), as [`AgentHandle::cancel`] does: it ends
        /// with its `Finished`, kept for its clients. False when no run is going there.
        pub fn cancel(&self, key: &str) -> bool {
            match self.run(key) {
                Some(run) if !lock(&run.state).finished => {
                    run.handle.cancel();
                    true
                }
                _ => false,
            }
        }

        /// Says something to the run kept under `key` while it goes (what a host's HTTP
        /// route for a person typing mid-answer calls), as [`AgentHandle::steer`] does: the
        /// words enter the run at its next safe point (the current response's calls all
        /// answered, before the next model call), and its clients see them there (AG-UI: a
        /// user text message; the AI SDK: a `data-steered` part). A run that ends before
        /// that point tells its clients what it did not deliver (AG-UI: `CUSTOM`
        /// `agent_loop.undelivered`; the AI SDK: `data-undelivered`). False when no run is
        /// going there (the words were not taken: send them as a new message).
        pub fn steer(&self, key: &str, input: impl Into<UserInput>) -> bool {
            match self.run(key) {
                Some(run) if !lock(&run.state).finished => {
                    run.handle.steer(input);
                    true
                }
                _ => false,
            }
        }

        /// Lets the run kept under `key` finish its turn (its answer and its tools), then
        /// end, as [`AgentHandle::stop_after_turn`] does: its clients see a finished run,
        /// nothing aborted. [`cancel`](Self::cancel) is the hard stop. False when no run is
        /// going there.
        pub fn stop_after_turn(&self, key: &str) -> bool {
            match self.run(key) {
                Some(run) if !lock(&run.state).finished => {
                    run.handle.stop_after_turn();
                    true
                }
                _ => false,
            }
        }

        fn run(&self, key: &str) -> Option<Arc<Run>> {
            lock(&self.inner.runs).get(key).cloned()
        }

        /// The run kept under `key`, if its run id is `run_id` (any, for `None`), and
        /// whether it is still going.
        pub(crate) fn find(&self, key: &str, run_id: Option<&str>) -> Option<bool> {
            let run = self.run(key)?;
            if run_id.is_some_and(|id| id != run.run_id) {
                return None;
            }
            let finished = lock(&run.state).finished;
            Some(!finished)
        }

        /// Starts keeping the run of `frames` (SSE frames without ids) under `key`: a task
        /// drives it and numbers its frames; the first client's stream is returned.
        pub(crate) fn start(
            &self,
            key: &str,
            run_id: &str,
            frames: impl Stream<Item = Bytes> + Send + 'static,
            handle: AgentHandle,
        ) -> impl Stream<Item = Bytes> + Send + 'static {
            let number = self
                .inner
                .started
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let run = Arc::new(Run {
                run_id: run_id.to_owned(),
                number,
                state: Mutex::new(RunState {
                    buffer: ReplayBuffer::new(self.inner.limits),
                    finished: false,
                }),
                changed: watch::channel(()).0,
                watchers: watch::channel(0).0,
                handle,
            });
            {
                let mut runs = lock(&self.inner.runs);
                runs.insert(key.to_owned(), run.clone());
                while runs.len() > self.inner.max_runs {
                    let oldest = runs
                        .iter()
                        .filter(|(_, r)| lock(&r.state).finished)
                        .min_by_key(|(_, r)| r.number)
                        .map(|(k, _)| k.clone());
                    match oldest {
                        Some(k) => runs.remove(&k),
                        None => break,
                    };
                }
            }
            let first = follow(run.clone(), 0);
            tokio::spawn(pump(run, frames, self.inner.grace));
            first
        }

        /// The frames of the run under `key` after `last_event_id` (none: from its first),
        /// then the live ones.
        pub(crate) fn subscribe(
            &self,
            key: &str,
            run_id: Option<&str>,
            last_event_id: Option<&str>,
        ) -> Result<impl Stream<Item = Bytes> + Send + 'static, ReplayError> {
            let run = self
                .run(key)
                .filter(|run| run_id.is_none_or(|id| id == run.run_id))
                .ok_or_else(|| ReplayError::NoRun(key.to_owned()))?;
            let last_seen = {
                let state = lock(&run.state);
                let last_seen = parse_id(last_event_id, state.buffer.last_id())?;
                state.buffer.after(last_seen)?;
                last_seen
            };
            Ok(follow(run, last_seen))
        }
    }

    /// Drives the run: numbers and keeps each frame; cancels the run once no client has
    /// followed it for `grace`; marks the end.
    async fn pump(
        run: Arc<Run>,
        frames: impl Stream<Item = Bytes> + Send + 'static,
        grace: Duration,
    ) {
        let mut frames = std::pin::pin!(frames);
        let abandoned = abandoned(run.watchers.subscribe(), grace);
        let mut abandoned = std::pin::pin!(abandoned);
        let mut cancelled = false;
        loop {
            tokio::select! {
                frame = frames.next() => match frame {
                    Some(frame) => {
                        lock(&run.state).buffer.push(&frame);
                        run.changed.send_modify(|_| {});
                    }
                    None => break,
                },
                _ = &mut abandoned, if !cancelled => {
                    // The run ends as a cancelled run does, with its `Finished`, kept for a
                    // client that comes back.
                    run.handle.cancel();
                    cancelled = true;
                }
            }
        }
        lock(&run.state).finished = true;
        run.changed.send_modify(|_| {});
    }

    /// Ends once no client has followed the run for `grace` in a row.
    async fn abandoned(mut watchers: watch::Receiver<usize>, grace: Duration) {
        loop {
            if watchers.wait_for(|n| *n == 0).await.is_err() {
                return std::future::pending().await;
            }
            tokio::select! {
                _ = tokio::time::sleep(grace) => return,
                _ = watchers.wait_for(|n| *n > 0) => {}
            }
        }
    }

    /// A client following the run (counted while it lives).
    struct Watching(Arc<Run>);

    impl Drop for Watching {
        fn drop(&mut self) {
            self.0.watchers.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    /// The run's frames after `last_seen`, then the live ones, each once; ends at the run's
    /// end, or when the client fell so far behind that the buffer dropped its next frame
    /// (its reconnect then says so).
    fn follow(run: Arc<Run>, last_seen: u64) -> impl Stream<Item = Bytes> + Send + 'static {
        run.watchers.send_modify(|n| *n += 1);
        let changed = run.changed.subscribe();
        let state = (
            Watching(run),
            changed,
            last_seen,
            Vec::<Bytes>::new().into_iter(),
        );
        futures::stream::unfold(
            state,
            |(watching, mut changed, mut cursor, mut pending)| async move {
                loop {
                    if let Some(frame) = pending.next() {
                        return Some((frame, (watching, changed, cursor, pending)));
                    }
                    changed.borrow_and_update();
                    let (frames, finished) = {
                        let state = lock(&watching.0.state);
                        (state.buffer.after(cursor), state.finished)
                    };
                    match frames {
                        Ok(frames) if !frames.is_empty() => {
                            cursor = frames.last().map_or(cursor, |(id, _)| *id);
                            let frames: Vec<Bytes> = frames.into_iter().map(|(_, f)| f).collect();
                            pending = frames.into_iter();
                        }
                        Ok(_) if finished => return None,
                        Ok(_) => {
                            if changed.changed().await.is_err() {
                                return None;
                            }
                        }
                        Err(_) => return None,
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the limits and frames: the buffer keeps at most the limits (or the one
        /// newest frame), ids are consecutive and end at the last pushed, and a client that
        /// saw id `n` gets exactly `n + 1 ..= last` or is told they were dropped.
        #[test]
        fn the_buffer_is_bounded_and_replays_exactly_what_was_missed(
            sizes in proptest::collection::vec(0usize..64, 0..60),
            events in 1usize..20,
            bytes in 0usize..600,
            seen in 0u64..70,
        ) {
            let mut buffer = ReplayBuffer::new(ReplayLimits::default().events(events).bytes(bytes));
            for (i, size) in sizes.iter().enumerate() {
                let frame = format!("data: {i}{}\n\n", "x".repeat(*size));
                let sent = buffer.push(frame.as_bytes());
                prop_assert_eq!(sent, with_id(i as u64 + 1, frame.as_bytes()));
            }
            let last = sizes.len() as u64;
            prop_assert_eq!(buffer.last_id(), last);
            let all = buffer.after(buffer.frames.front().map_or(last, |(id, _)| id - 1)).unwrap();
            prop_assert!(all.len() <= events);
            let total: usize = all.iter().map(|(_, f)| f.len()).sum();
            prop_assert!(all.len() <= 1 || total <= bytes);
            match buffer.after(seen) {
                Ok(frames) => {
                    let ids: Vec<u64> = frames.iter().map(|(id, _)| *id).collect();
                    prop_assert_eq!(ids, (seen + 1..=last).collect::<Vec<_>>());
                }
                Err(ReplayError::UnknownId { .. }) => prop_assert!(seen > last),
                Err(ReplayError::Evicted { oldest, .. }) => {
                    prop_assert!(seen <= last && seen + 1 < oldest);
                }
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
    }

    #[test]
    fn a_header_that_is_not_an_id_is_refused() {
        let mut buffer = ReplayBuffer::new(ReplayLimits::default());
        buffer.push(b"data: 1\n\n");
        assert_eq!(buffer.after_header(None).unwrap().len(), 1);
        assert_eq!(buffer.after_header(Some(" 1 ")).unwrap().len(), 0);
        assert!(matches!(
            buffer.after_header(Some("abc")),
            Err(ReplayError::UnknownId { .. })
        ));
    }
}
