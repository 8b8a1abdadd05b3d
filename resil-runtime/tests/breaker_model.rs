//! Model-based test of the breaker: random admissions, verdicts, drops and clock steps,
//! applied to the breaker and to a small reference model, which must agree after every step,
//! generations included.

mod common;

use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;
use resil_runtime::{Admission, Breaker, BreakerConfig, BreakerState, Rejected, Verdict};

#[derive(Debug, Clone)]
enum Step {
    Admit,
    Record(usize, Verdict),
    Drop(usize),
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let verdict = prop_oneof![
        Just(Verdict::Success),
        Just(Verdict::Failure),
        Just(Verdict::Neutral)
    ];
    prop_oneof![
        3 => Just(Step::Admit),
        3 => (any::<usize>(), verdict).prop_map(|(i, v)| Step::Record(i, v)),
        1 => any::<usize>().prop_map(Step::Drop),
        2 => (0u64..2_500).prop_map(Step::Advance),
    ]
}

/// What the breaker should do, written as plainly as possible.
#[derive(Debug)]
struct Model {
    threshold: u32,
    cooldown: u64,
    now: u64,
    state: BreakerState,
    failures: u32,
    opened_at: u64,
    probing: bool,
    generation: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticket {
    probe: bool,
    generation: u32,
}

#[derive(Debug, PartialEq, Eq)]
enum Admit {
    Pass { probe: bool },
    Wait,
    Reject { retry_in: Duration },
}

impl Model {
    fn admit(&mut self) -> (Admit, Option<Ticket>) {
        match self.state {
            BreakerState::Closed => {
                let ticket = self.ticket(false);
                (Admit::Pass { probe: false }, Some(ticket))
            }
            BreakerState::Open if self.now - self.opened_at < self.cooldown => {
                let left = self.cooldown - (self.now - self.opened_at);
                let retry_in = Duration::from_millis(left);
                (Admit::Reject { retry_in }, None)
            }
            BreakerState::Open => {
                self.transition(BreakerState::HalfOpen);
                self.probing = true;
                (Admit::Pass { probe: true }, Some(self.ticket(true)))
            }
            BreakerState::HalfOpen if self.probing => (Admit::Wait, None),
            BreakerState::HalfOpen => {
                self.probing = true;
                (Admit::Pass { probe: true }, Some(self.ticket(true)))
            }
        }
    }

    fn ticket(&self, probe: bool) -> Ticket {
        Ticket {
            probe,
            generation: self.generation,
        }
    }

    fn transition(&mut self, to: BreakerState) {
        self.state = to;
        self.failures = 0;
        self.generation = (self.generation + 1) % (1 << 30);
        if to == BreakerState::Open {
            self.opened_at = self.now;
        }
    }

    fn record(&mut self, ticket: Ticket, verdict: Verdict) -> Option<BreakerState> {
        if ticket.generation != self.generation {
            return None;
        }
        if ticket.probe {
            if self.state != BreakerState::HalfOpen {
                return None;
            }
            self.probing = false;
            let to = match verdict {
                Verdict::Success => BreakerState::Closed,
                Verdict::Failure => BreakerState::Open,
                Verdict::Neutral => return None,
            };
            self.transition(to);
            return Some(to);
        }
        if self.state != BreakerState::Closed {
            return None;
        }
        match verdict {
            Verdict::Success => self.failures = 0,
            Verdict::Failure => {
                self.failures += 1;
                if self.failures >= self.threshold {
                    self.transition(BreakerState::Open);
                    return Some(BreakerState::Open);
                }
            }
            Verdict::Neutral => {}
        }
        None
    }
}

fn run(threshold: u32, cooldown_ms: u64, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let runtime = common::paused_runtime();
    let _clock = runtime.enter();
    let cooldown = Duration::from_millis(cooldown_ms);
    let breaker = Breaker::new("model", BreakerConfig::new(threshold, cooldown).unwrap());
    let mut model = Model {
        threshold,
        cooldown: cooldown_ms,
        now: 0,
        state: BreakerState::Closed,
        failures: 0,
        opened_at: 0,
        probing: false,
        generation: 0,
    };
    let mut held: Vec<(Admission<'_>, Ticket)> = Vec::new();
    for step in steps {
        match step {
            Step::Admit => {
                let (expected, ticket) = model.admit();
                let actual = match breaker.admit().now_or_never() {
                    None => Admit::Wait,
                    Some(Ok(admission)) => {
                        let probe = admission.is_probe();
                        held.push((admission, ticket.expect("the model admitted too")));
                        Admit::Pass { probe }
                    }
                    Some(Err(Rejected::BreakerOpen { retry_in, .. })) => Admit::Reject { retry_in },
                    Some(Err(other)) => panic!("unexpected rejection {other}"),
                };
                prop_assert_eq!(actual, expected);
            }
            Step::Record(index, verdict) if !held.is_empty() => {
                let (admission, ticket) = held.swap_remove(index % held.len());
                let expected = model.record(ticket, verdict);
                let actual = admission.record(verdict).map(|transition| transition.to);
                prop_assert_eq!(actual, expected);
            }
            Step::Drop(index) if !held.is_empty() => {
                let (admission, ticket) = held.swap_remove(index % held.len());
                drop(admission);
                if ticket.probe {
                    model.record(ticket, Verdict::Neutral);
                }
            }
            Step::Advance(ms) => {
                runtime.block_on(tokio::time::advance(Duration::from_millis(ms)));
                model.now += ms;
            }
            Step::Record(..) | Step::Drop(_) => {}
        }
        prop_assert_eq!(breaker.state(), model.state);
        prop_assert_eq!(breaker.generation(), model.generation);
        if model.state == BreakerState::Closed {
            prop_assert_eq!(breaker.failures(), model.failures);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(common::proptest_config(512, "breaker_model.proptest-regressions"))]

    #[test]
    fn the_breaker_agrees_with_its_model(
        threshold in 1u32..4,
        cooldown_ms in 1u64..3_000,
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        run(threshold, cooldown_ms, steps)?;
    }
}
