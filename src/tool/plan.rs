//! The scheduling vocabulary of tool calls, and the pure planner that orders a batch.
//!
//! Every call has one [`Schedule`]: its [`Access`] (does it change anything?) and its
//! [`Concurrency`] (which other calls of its batch may overlap it?). The registry works it
//! out when it prepares a call (access from [`Tool::read_only`](super::Tool::read_only),
//! concurrency from [`Tool::concurrency`](super::Tool::concurrency)); [`plan`] turns the
//! schedules of a batch into a [`Plan`] (which earlier calls each call waits for) with no I/O
//! and no clock; `exec` carries the plan out.
//!
//! ```text
//!   Shared      waits for the last Exclusive call before it
//!   Keyed(k)    waits for the last Exclusive call before it and the previous call keyed k
//!   Exclusive   waits for every call since the previous Exclusive call (and that one)
//! ```
//!
//! Access does not order the calls of one batch (a read-only call and a side-effecting call
//! that are both `Shared` run side by side, as their concurrency says); it decides what may
//! run before the batch exists: a read-only call may start while the model still streams,
//! ahead of its turn's side-effecting calls, which then wait for it (see
//! [`Access::ReadOnly`]).

use std::collections::HashMap;

/// How one tool call may overlap the other calls of its batch.
///
/// Decided per call by [`Tool::concurrency`](super::Tool::concurrency), so a file tool can
/// lock by path. Together with [`Access`] it forms how a call is scheduled.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Concurrency {
    /// Runs beside any other call (up to the registry's concurrency limit).
    #[default]
    Shared,
    /// Runs alone: it starts after every earlier call of the batch has finished, and no later
    /// call starts before it has finished.
    Exclusive,
    /// Calls with the same key run one after another, in the model's order; calls with
    /// different keys (and shared calls) run beside them.
    Keyed(String),
}

/// What a tool call does to the world, which decides whether it may run early.
///
/// Set per tool by [`Tool::read_only`](super::Tool::read_only) (`true` is
/// [`Access::ReadOnly`]); read it back with
/// [`ToolRegistry::access`](super::ToolRegistry::access).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Access {
    /// No side effects: safe to start while the model still streams its turn (once its
    /// arguments are complete and no side-effecting call came before it in that turn), and
    /// safe to run again. The turn's side-effecting calls wait for such early calls.
    ReadOnly,
    /// May change something: runs only once the model's turn is complete, after the turn's
    /// early read-only calls have finished.
    #[default]
    SideEffects,
}

impl Access {
    /// The access a tool with this [`Tool::read_only`](super::Tool::read_only) has.
    pub fn from_read_only(read_only: bool) -> Self {
        if read_only {
            Access::ReadOnly
        } else {
            Access::SideEffects
        }
    }

    /// Whether this is [`Access::ReadOnly`].
    pub fn is_read_only(self) -> bool {
        self == Access::ReadOnly
    }
}

/// How one tool call is scheduled: what it touches and what it may overlap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Schedule {
    /// Whether the call may run early; see [`Access`].
    pub(crate) access: Access,
    /// Which calls of its batch it may overlap; see [`Concurrency`].
    pub(crate) concurrency: Concurrency,
}

impl Schedule {
    /// A schedule with this access and concurrency.
    pub(crate) fn new(access: Access, concurrency: Concurrency) -> Self {
        Schedule {
            access,
            concurrency,
        }
    }
}

/// The order of one batch: for each call, the earlier calls it must wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Per call (in the model's order): indices of earlier calls, ascending. Empty for calls
    /// that were not planned (`None` in [`plan`]'s input).
    deps: Vec<Vec<usize>>,
}

impl Plan {
    /// The calls that must finish before call `index` starts.
    pub(crate) fn deps(&self, index: usize) -> &[usize] {
        self.deps.get(index).map_or(&[], Vec::as_slice)
    }

    /// The plan as waves: a call's wave is one after the latest wave it waits for, so every
    /// call of a wave may run beside the others of that wave. Unplanned calls are left out.
    #[cfg(test)]
    fn waves(&self, planned: &[Option<Schedule>]) -> Vec<Vec<usize>> {
        let mut wave_of: Vec<usize> = Vec::with_capacity(self.deps.len());
        let mut waves: Vec<Vec<usize>> = Vec::new();
        for (index, deps) in self.deps.iter().enumerate() {
            let wave = deps.iter().map(|&d| wave_of[d] + 1).max().unwrap_or(0);
            wave_of.push(wave);
            if planned[index].is_some() {
                if waves.len() <= wave {
                    waves.resize_with(wave + 1, Vec::new);
                }
                waves[wave].push(index);
            }
        }
        waves
    }
}

/// Plans a batch, in the model's order. `None` stands for a call that will not run (an
/// unknown tool, bad arguments): it waits for nothing and nothing waits for it.
///
/// Only [`Concurrency`] orders the calls of a batch; see the module docs.
pub(crate) fn plan(schedules: &[Option<Schedule>]) -> Plan {
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(schedules.len());
    let mut last_exclusive: Option<usize> = None;
    let mut since_exclusive: Vec<usize> = Vec::new();
    let mut last_by_key: HashMap<&str, usize> = HashMap::new();

    for (index, schedule) in schedules.iter().enumerate() {
        let Some(schedule) = schedule else {
            deps.push(Vec::new());
            continue;
        };
        let mut mine: Vec<usize> = last_exclusive.into_iter().collect();
        match &schedule.concurrency {
            Concurrency::Shared => since_exclusive.push(index),
            Concurrency::Keyed(key) => {
                mine.extend(last_by_key.insert(key, index));
                since_exclusive.push(index);
            }
            Concurrency::Exclusive => {
                mine.append(&mut since_exclusive);
                last_by_key.clear();
                last_exclusive = Some(index);
            }
        }
        mine.sort_unstable();
        deps.push(mine);
    }
    Plan { deps }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Option<Schedule> {
        Some(Schedule::default())
    }

    fn read_only() -> Option<Schedule> {
        Some(Schedule::new(Access::ReadOnly, Concurrency::Shared))
    }

    fn exclusive() -> Option<Schedule> {
        Some(Schedule::new(Access::SideEffects, Concurrency::Exclusive))
    }

    fn keyed(key: &str) -> Option<Schedule> {
        Some(Schedule::new(
            Access::SideEffects,
            Concurrency::Keyed(key.into()),
        ))
    }

    fn deps(schedules: &[Option<Schedule>]) -> Vec<Vec<usize>> {
        let plan = plan(schedules);
        (0..schedules.len())
            .map(|i| plan.deps(i).to_vec())
            .collect()
    }

    fn waves(schedules: &[Option<Schedule>]) -> Vec<Vec<usize>> {
        plan(schedules).waves(schedules)
    }

    #[test]
    fn an_empty_batch_has_an_empty_plan() {
        assert_eq!(deps(&[]), Vec::<Vec<usize>>::new());
        assert_eq!(waves(&[]), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn shared_calls_all_run_at_once() {
        let batch = [shared(), shared(), shared()];
        assert_eq!(deps(&batch), [Vec::<usize>::new(), vec![], vec![]]);
        assert_eq!(waves(&batch), [vec![0, 1, 2]]);
    }

    #[test]
    fn an_exclusive_call_splits_the_batch() {
        let batch = [shared(), shared(), exclusive(), shared(), shared()];
        assert_eq!(deps(&batch), [vec![], vec![], vec![0, 1], vec![2], vec![2]]);
        assert_eq!(waves(&batch), [vec![0, 1], vec![2], vec![3, 4]]);
    }

    #[test]
    fn exclusive_calls_in_a_row_run_one_after_another() {
        let batch = [exclusive(), exclusive(), exclusive()];
        assert_eq!(deps(&batch), [vec![], vec![0], vec![1]]);
        assert_eq!(waves(&batch), [vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn keyed_calls_chain_per_key_beside_other_keys() {
        let batch = [
            keyed("a"),
            keyed("b"),
            keyed("a"),
            shared(),
            keyed("a"),
            keyed("b"),
        ];
        assert_eq!(
            deps(&batch),
            [vec![], vec![], vec![0], vec![], vec![2], vec![1]]
        );
        assert_eq!(waves(&batch), [vec![0, 1, 3], vec![2, 5], vec![4]]);
    }

    #[test]
    fn an_exclusive_call_resets_the_key_chains() {
        let batch = [keyed("a"), exclusive(), keyed("a"), keyed("a")];
        // After the exclusive call, the first "a" waits for it alone, not for the "a" before.
        assert_eq!(deps(&batch), [vec![], vec![0], vec![1], vec![1, 2]]);
        assert_eq!(waves(&batch), [vec![0], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn an_exclusive_call_waits_for_keyed_and_shared_calls_since_the_last_one() {
        let batch = [exclusive(), keyed("a"), shared(), keyed("a"), exclusive()];
        assert_eq!(
            deps(&batch),
            [vec![], vec![0], vec![0], vec![0, 1], vec![0, 1, 2, 3]]
        );
        // Call 4 waits for 0 transitively too; its listed deps are what it waits on directly.
        assert_eq!(waves(&batch), [vec![0], vec![1, 2], vec![3], vec![4]]);
    }

    #[test]
    fn access_does_not_order_calls_within_a_batch() {
        // A read-only and a side-effecting shared call run side by side, in either order.
        assert_eq!(waves(&[read_only(), shared()]), [vec![0, 1]]);
        assert_eq!(waves(&[shared(), read_only()]), [vec![0, 1]]);
        // A read-only call still obeys its concurrency.
        let exclusive_read = Some(Schedule::new(Access::ReadOnly, Concurrency::Exclusive));
        assert_eq!(
            waves(&[read_only(), exclusive_read, shared()]),
            [vec![0], vec![1], vec![2]]
        );
    }

    #[test]
    fn calls_that_will_not_run_wait_for_nothing_and_hold_nobody_up() {
        let batch = [
            shared(),
            None,
            exclusive(),
            None,
            keyed("k"),
            None,
            keyed("k"),
        ];
        assert_eq!(
            deps(&batch),
            [vec![], vec![], vec![0], vec![], vec![2], vec![], vec![2, 4]]
        );
        assert_eq!(waves(&batch), [vec![0], vec![2], vec![4], vec![6]]);
    }

    #[test]
    fn access_follows_read_only() {
        assert_eq!(Access::from_read_only(true), Access::ReadOnly);
        assert_eq!(Access::from_read_only(false), Access::SideEffects);
        assert!(Access::ReadOnly.is_read_only());
        assert!(!Access::default().is_read_only());
        assert_eq!(Schedule::default().concurrency, Concurrency::Shared);
    }
}
