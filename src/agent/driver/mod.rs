//! The tokio driver of a run: it carries out what the [`AgentMachine`](super::AgentMachine)
//! asks and feeds back what happened, deciding nothing. `driver.rs` is the driver itself
//! (its actions carried out, the run's end), `listen.rs` what it waits for and hears,
//! `switch.rs` the parts it switches mid-run, `io.rs` the model call in flight and the running
//! tools, `run.rs` the event stream behind [`Agent::run`](super::Agent::run), `start.rs` how a
//! run starts (session loaded, lease taken, or a pause claimed), `persist.rs` the session I/O,
//! `oneshot.rs` the one-shot calls, `summarizer.rs` the model-backed summarizer and
//! `telemetry.rs` the run's spans.

// The driver's own file: named for what it holds, as the other files are.
#[allow(clippy::module_inception)]
pub(super) mod driver;
pub(super) mod io;
mod listen;
pub(super) mod oneshot;
pub(super) mod persist;
pub(super) mod run;
pub(super) mod start;
pub(super) mod summarizer;
mod switch;
pub(super) mod telemetry;
