//! How a run starts: the session loaded (if the agent has one), then the machine built, on
//! new input or from a pause, which is checked and, with a session, claimed before anything
//! of it runs.

use std::sync::Mutex;
use std::time::Instant;

use crate::context::ContextManager;
use crate::error::Error;
use crate::input::UserInput;
use crate::tool::ToolCatalog;

use super::persist::{self, SessionLink};
use crate::agent::handle::{lock, Shared};
use crate::agent::machine::config::MachineConfig;
use crate::agent::machine::output::RunOptions;
use crate::agent::machine::pause::{PausedRun, Resolutions};
use crate::agent::machine::AgentMachine;

/// How a run starts: on new input, or from a pause.
pub(crate) enum Start {
    Run {
        input: UserInput,
        options: RunOptions,
    },
    Resume {
        paused: Box<PausedRun>,
        resolutions: Resolutions,
        options: RunOptions,
    },
}

/// The run's machine over `context`; on failure, the error and the conversation as it was.
pub(crate) async fn machine(
    start: Start,
    mut context: ContextManager,
    config: MachineConfig,
    catalog: ToolCatalog,
    session: Option<&SessionLink>,
    shared: &Mutex<Shared>,
    now: Instant,
) -> Result<AgentMachine, (Error, ContextManager)> {
    if let Some(link) = session {
        // A new run holds the session from its start; a resume takes it when it claims
        // the pause, once its answers were checked.
        let opened = match start {
            Start::Run { .. } => persist::acquire(link, shared, &mut context).await,
            Start::Resume { .. } => persist::open(link, shared, &mut context).await,
        };
        if let Err(e) = opened {
            return Err((e, context));
        }
    }
    let machine = match start {
        Start::Run { input, options } => {
            let mut machine = AgentMachine::new(config, context, catalog);
            if let (Some(_), Some(version)) = (session, lock(shared).session_version) {
                // Its pauses name the version: unique in the session's log, rewinds and all.
                machine.set_session_version(version);
            }
            // The agent a kept handoff left in charge (the driver switched its parts too).
            let route = lock(shared).route.clone();
            if !machine.start_in_charge(&route) {
                lock(shared).route.clear();
            }
            machine.start_with(input, options, now);
            machine
        }
        Start::Resume {
            paused,
            resolutions,
            options,
        } => {
            let resumed = AgentMachine::resume(
                config,
                context.clone(),
                catalog,
                &paused,
                &resolutions,
                options,
                now,
            );
            let mut machine = match resumed {
                Ok(machine) => machine,
                Err(e) => return Err((e.into(), context)),
            };
            if let Some(link) = session {
                match persist::claim(link, shared, &paused).await {
                    // The session holds the paused conversation: only what the resume added
                    // (the answers applied already) needs saving.
                    Ok(true) => machine.context_mut().restored_is_saved(),
                    Ok(false) => {}
                    Err(e) => return Err((e, context)),
                }
            }
            machine
        }
    };
    // A run leaves behind the pause the agent (or its session) waited in; a resume took it.
    let mut shared = lock(shared);
    shared.paused = None;
    shared.ran = true;
    Ok(machine)
}
