//! What the driver hears between the machine's actions: the host's controls through its
//! handle (a cancel, a stop request, its words), the model's stream, the tools' progress and
//! results, sub-agents' events and the machine's timer, each turned into the machine's
//! [`Input`] and nothing decided.

use futures::stream::StreamExt;

use super::driver::{now, Driver};
use super::io::Io;
use crate::agent::machine::{AgentMachine, Input};
use crate::wire::LlmEvent;

impl Driver {
    /// Feeds the machine what the host asked through its handle since the last look: a
    /// cancel, a stop request, its words (which, once the machine is finished, wait for the
    /// outcome).
    pub(super) fn take_controls(&mut self) {
        if !self.told_cancel && self.cancel.is_cancelled() {
            self.told_cancel = true;
            self.tell(Input::Cancel);
        } else if !self.told_stop && self.handle.stop_requested() {
            self.told_stop = true;
            self.tell(Input::StopAfterTurn);
        }
        for input in self.handle.take_steering() {
            match self.machine.as_mut() {
                Some(machine) if !machine.is_finished() => {
                    machine.handle(Input::Steer(input), now());
                }
                _ => self.undelivered.push(input),
            }
        }
    }

    /// Waits for the next thing that happens; `None` when it is nothing the machine needs
    /// to hear (a finished future). Progress before results: a tool that reports and returns
    /// at once has its progress shown first.
    pub(super) async fn next_input(&mut self, io: &mut Io) -> Option<Input> {
        // The machine's timer (a backoff before re-sending a turn), if it set one.
        let timeout = self.machine.as_ref().and_then(AgentMachine::poll_timeout);
        let handle = self.handle.clone();
        tokio::select! {
            biased;
            _ = self.cancel.cancelled(), if !self.told_cancel => {
                self.told_cancel = true;
                Some(Input::Cancel)
            }
            () = handle.woken() => {
                self.take_controls();
                None
            }
            Some(progress) = io.progress_rx.recv() => Some(Input::ToolProgress(progress)),
            Some(nested) = io.nested_rx.recv() => Some(Input::Nested(nested)),
            Some(result) = io.results_rx.recv() => Some(Input::ToolDone(result)),
            item = io.model_rx.recv(), if io.model_live => Some(match item {
                Some(Some(Ok(event))) => {
                    self.telemetry.model_event(&event);
                    if matches!(event, LlmEvent::MessageStop { .. }) {
                        // The machine ends the attempt at `MessageStop` and stops the
                        // model (`Action::StopModel`). Dropping the call first frees its
                        // request, whose history the machine is about to append to: with
                        // the request gone, the append is in place instead of a copy of
                        // the whole history (which made a turn cost grow with the history).
                        io.stop_model();
                    }
                    Input::ModelEvent(event)
                }
                Some(Some(Err(error))) => {
                    io.model_live = false;
                    self.telemetry.model_failed(&error);
                    Input::ModelEnded(Err(error))
                }
                Some(None) | None => {
                    io.model_live = false;
                    self.telemetry.model_done();
                    Input::ModelEnded(Ok(()))
                }
            }),
            () = async { if let Some(m) = io.model.as_mut() { m.await } }, if io.model.is_some() => {
                io.model = None;
                None
            }
            _ = io.tools.next(), if !io.tools.is_empty() => None,
            () = async {
                if let Some(at) = timeout {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await
                }
            }, if timeout.is_some() => {
                if let Some(machine) = self.machine.as_mut() {
                    machine.handle_timeout(now());
                }
                None
            }
        }
    }
}
