//! What a run spends and may spend: its usage and cost (the failed attempts' part apart), and
//! the budget check before each model call, against what that call could cost at most.

use crate::error::{ConfigError, Error};

use crate::pricing::Usd;

use super::config::MachineConfig;
pub(crate) use super::spending::Spent;
use crate::agent::events::{RunOutcome, Termination};

impl Spent {
    /// What a run's outcome says it spent.
    pub(crate) fn of(outcome: &RunOutcome) -> Spent {
        Spent {
            usage: outcome.usage,
            failed_usage: outcome.failed_usage,
            cost: outcome.cost,
            failed_cost: outcome.failed_cost,
        }
    }

    /// Writes these figures into `outcome`.
    pub(crate) fn write_to(&self, outcome: &mut RunOutcome) {
        outcome.usage = self.usage;
        outcome.failed_usage = self.failed_usage;
        outcome.cost = self.cost;
        outcome.failed_cost = self.failed_cost;
    }
}

/// The most the next model call can use: its counted request plus its `max_tokens`, and that
/// at its model's prices (`None`: no price known for `model`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Estimate {
    pub(crate) model: String,
    pub(crate) tokens: u64,
    pub(crate) cost: Option<Usd>,
}

impl Estimate {
    /// The estimate of a call to `model` with a request of `input_tokens` (counted) that may
    /// generate `max_tokens`, at `config`'s prices.
    pub(crate) fn new(
        config: &MachineConfig,
        model: &str,
        input_tokens: u64,
        max_tokens: u64,
    ) -> Estimate {
        Estimate {
            model: model.to_owned(),
            tokens: input_tokens.saturating_add(max_tokens),
            cost: config
                .policy
                .pricing
                .price(model)
                .map(|price| price.most(input_tokens, max_tokens)),
        }
    }
}

/// What the budgets say of the next model call.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// It fits, and so would another like it.
    Go,
    /// It fits, but another like it would not: the last call the budgets allow. The
    /// termination says which budget, with the figures, if the run ends after it.
    Last(Termination),
    /// It could cross a budget: the run ends before it.
    Stop(Termination),
}

/// Checks the next call against the run's budgets (`MachineConfig::token_budget` and
/// `cost_budget`): a call that could cross one is never started.
pub(crate) fn check(config: &MachineConfig, spent: &Spent, next: &Estimate) -> Verdict {
    let mut last = None;
    if let Some(budget) = config.policy.token_budget {
        let used = spent.usage.total_tokens();
        let limit = Termination::TokenBudget {
            used,
            next_call: next.tokens,
            budget,
        };
        match fits(used, next.tokens, budget) {
            Fit::No => return Verdict::Stop(limit),
            Fit::Once => last = Some(limit),
            Fit::Twice => {}
        }
    }
    if let Some(budget) = config.policy.cost_budget {
        let Some(next_call) = next.cost else {
            return Verdict::Stop(Termination::Error(Error::Config(ConfigError::setting(
                "cost_budget",
                format!(
                    "no price is known for the model {:?}, so a call to it cannot be kept within the budget: give its price (RunPolicy::pricing)",
                    next.model
                ),
            ))));
        };
        let limit = Termination::CostBudget {
            spent: spent.cost,
            next_call,
            budget,
        };
        match fits(
            spent.cost.usd.picodollars(),
            next_call.picodollars(),
            budget.picodollars(),
        ) {
            Fit::No => return Verdict::Stop(limit),
            Fit::Once => last = last.or(Some(limit)),
            Fit::Twice => {}
        }
    }
    match last {
        Some(limit) => Verdict::Last(limit),
        None => Verdict::Go,
    }
}

/// What a run's budgets have left (`None`: no such budget): what a sub-agent's run under
/// one of its calls may spend at most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    pub(crate) tokens: Option<u64>,
    pub(crate) cost: Option<Usd>,
}

impl Budget {
    /// What `config`'s budgets leave after `spent`.
    pub(crate) fn left(config: &MachineConfig, spent: &Spent) -> Budget {
        Budget {
            tokens: config
                .policy
                .token_budget
                .map(|b| b.saturating_sub(spent.usage.total_tokens())),
            cost: config
                .policy
                .cost_budget
                .map(|b| b.saturating_sub(spent.cost.usd)),
        }
    }

    /// Caps `config`'s budgets (a sub-agent's) at what is left.
    pub(crate) fn bound(&self, config: &mut MachineConfig) {
        config.policy.token_budget = tighter(config.policy.token_budget, self.tokens);
        config.policy.cost_budget = tighter(config.policy.cost_budget, self.cost);
    }
}

fn tighter<T: Ord + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Gives `to` (the settings of the agent a conversation is handed to) the tighter of its
/// budgets and `from`'s: a run's budgets hold whichever agent has it.
pub(crate) fn keep_budgets(from: &MachineConfig, to: &mut MachineConfig) {
    let (from, to) = (&from.policy, &mut to.policy);
    to.token_budget = tighter(from.token_budget, to.token_budget);
    to.cost_budget = tighter(from.cost_budget, to.cost_budget);
    to.final_answer_at_budget |= from.final_answer_at_budget;
}

enum Fit {
    No,
    Once,
    Twice,
}

fn fits(used: u64, next: u64, budget: u64) -> Fit {
    let after = used.saturating_add(next);
    if after > budget {
        Fit::No
    } else if after.saturating_add(next) > budget {
        Fit::Once
    } else {
        Fit::Twice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Usage;
    use crate::pricing::{Cost, ModelPrice, Pricing};
    use std::sync::Arc;

    fn config(tokens: Option<u64>, dollars: Option<f64>) -> MachineConfig {
        let mut config = MachineConfig::default();
        config.policy.token_budget = tokens;
        config.policy.cost_budget = dollars.map(Usd::from_dollars);
        config.policy.pricing =
            Arc::new(Pricing::empty().with("m", ModelPrice::per_million(1.0, 2.0)));
        config
    }

    fn spent(tokens: u64, dollars: f64) -> Spent {
        Spent::call(
            Usage {
                input_tokens: tokens,
                ..Usage::default()
            },
            Cost::priced(Usd::from_dollars(dollars)),
        )
    }

    #[test]
    fn a_call_that_could_cross_the_token_budget_is_not_started() {
        let config = config(Some(1_000), None);
        let next = Estimate::new(&config, "m", 300, 100);
        assert_eq!(next.tokens, 400);
        assert!(matches!(check(&config, &spent(0, 0.0), &next), Verdict::Go));
        assert!(matches!(
            check(&config, &spent(200, 0.0), &next),
            Verdict::Go
        ));
        // 201 + 400 fits, and a second 400 would not.
        assert!(matches!(
            check(&config, &spent(201, 0.0), &next),
            Verdict::Last(Termination::TokenBudget {
                used: 201,
                next_call: 400,
                budget: 1_000
            })
        ));
        // Exactly at the budget still fits; one token over does not.
        assert!(matches!(
            check(&config, &spent(600, 0.0), &next),
            Verdict::Last(_)
        ));
        assert!(matches!(
            check(&config, &spent(601, 0.0), &next),
            Verdict::Stop(Termination::TokenBudget {
                used: 601,
                next_call: 400,
                budget: 1_000
            })
        ));
    }

    #[test]
    fn a_call_that_could_cross_the_cost_budget_is_not_started() {
        let config = config(None, Some(0.01));
        // 1,000 tokens at $1 and 1,000 at $2 per million: $0.003 at most.
        let next = Estimate::new(&config, "m", 1_000, 1_000);
        assert_eq!(next.cost, Some(Usd::from_dollars(0.003)));
        assert!(matches!(
            check(&config, &spent(0, 0.004), &next),
            Verdict::Go
        ));
        assert!(matches!(
            check(&config, &spent(0, 0.0041), &next),
            Verdict::Last(_)
        ));
        assert!(matches!(
            check(&config, &spent(0, 0.007), &next),
            Verdict::Last(_)
        ));
        match check(&config, &spent(0, 0.0071), &next) {
            Verdict::Stop(Termination::CostBudget {
                spent,
                next_call,
                budget,
            }) => {
                assert_eq!(spent.usd, Usd::from_dollars(0.0071));
                assert_eq!(next_call, Usd::from_dollars(0.003));
                assert_eq!(budget, Usd::from_dollars(0.01));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cost_budget_refuses_a_model_with_no_price() {
        let config = config(None, Some(1.0));
        let next = Estimate::new(&config, "unknown", 10, 10);
        assert_eq!(next.cost, None);
        match check(&config, &Spent::default(), &next) {
            Verdict::Stop(Termination::Error(e)) => {
                assert!(e.to_string().contains("\"unknown\""), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // Without a cost budget an unpriced model is fine.
        let config = super::tests::config(Some(100), None);
        assert!(matches!(
            check(&config, &Spent::default(), &next),
            Verdict::Go
        ));
    }

    #[test]
    fn a_handoff_keeps_the_tighter_budgets() {
        let from = config(Some(100), None);
        let mut to = config(Some(50), Some(2.0));
        keep_budgets(&from, &mut to);
        assert_eq!(
            (to.policy.token_budget, to.policy.cost_budget),
            (Some(50), Some(Usd::from_dollars(2.0)))
        );
        let mut to = config(None, None);
        keep_budgets(&config(Some(100), Some(1.0)), &mut to);
        assert_eq!(
            (to.policy.token_budget, to.policy.cost_budget),
            (Some(100), Some(Usd::from_dollars(1.0)))
        );
        let mut to = config(Some(500), Some(3.0));
        keep_budgets(&config(Some(100), Some(1.0)), &mut to);
        assert_eq!(
            (to.policy.token_budget, to.policy.cost_budget),
            (Some(100), Some(Usd::from_dollars(1.0)))
        );
        // Asking for a final answer at the budget holds too, whichever agent asked.
        let mut from = config(Some(100), None);
        from.policy.final_answer_at_budget = true;
        let mut to = config(None, None);
        keep_budgets(&from, &mut to);
        assert!(to.policy.final_answer_at_budget);
        let mut to = config(None, None);
        to.policy.final_answer_at_budget = true;
        keep_budgets(&config(None, None), &mut to);
        assert!(to.policy.final_answer_at_budget);
    }

    #[test]
    fn a_sub_agent_may_spend_what_its_caller_has_left() {
        let left = Budget::left(&config(Some(1_000), Some(1.0)), &spent(300, 0.25));
        assert_eq!(left.tokens, Some(700));
        assert_eq!(left.cost, Some(Usd::from_dollars(0.75)));
        let mut sub = config(Some(500), None);
        left.bound(&mut sub);
        assert_eq!(
            (sub.policy.token_budget, sub.policy.cost_budget),
            (Some(500), Some(Usd::from_dollars(0.75)))
        );
        let over = Budget::left(&config(Some(100), None), &spent(300, 0.0));
        assert_eq!((over.tokens, over.cost), (Some(0), None));
        let mut sub = config(None, None);
        Budget::default().bound(&mut sub);
        assert_eq!(
            (sub.policy.token_budget, sub.policy.cost_budget),
            (None, None)
        );
    }

    #[test]
    fn no_budget_is_always_go() {
        let config = config(None, None);
        let next = Estimate::new(&config, "m", u64::MAX, u64::MAX);
        assert!(matches!(
            check(&config, &spent(u64::MAX, 1e6), &next),
            Verdict::Go
        ));
    }

    #[test]
    fn spent_adds_up_with_the_failed_part_apart() {
        let usage = |n| Usage {
            output_tokens: n,
            ..Usage::default()
        };
        let dollars = |d| Cost::priced(Usd::from_dollars(d));
        let mut total = Spent::call(usage(10), dollars(0.5));
        total += Spent::failed(usage(3), dollars(0.25));
        assert_eq!(total.usage, usage(13));
        assert_eq!(total.failed_usage, usage(3));
        assert_eq!(total.cost, dollars(0.75));
        assert_eq!(total.failed_cost, dollars(0.25));
        let mut outcome = RunOutcome::new(Termination::Completed);
        total.write_to(&mut outcome);
        assert_eq!(Spent::of(&outcome), total);
    }
}
