//! Model-based test of the gate: random reservations, waits, cancellations, throttles and
//! clock steps, applied to a [`RateGate`] and to a plain reference model, which must agree at
//! every step; then the calls that started are checked against the gate's promises, which
//! the model does not encode: no window shorter than the period sees more than
//! `count + burst - 1` units start (so no more than `count` with burst 1), no instant more
//! than `burst`, and nothing starts while a throttle holds the gate.

use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::{RateGate, Slot};
use crate::Rejected;

#[derive(Debug, Clone)]
enum Step {
    /// A caller asks for `cost` units, willing to wait `deadline` milliseconds (or forever).
    Reserve { cost: u64, deadline: Option<u64> },
    /// Time passes: waiters whose slot comes start, or take a new slot if it was revoked.
    Advance(u64),
    /// A waiter (picked by index among those still waiting) gives up and gives its slot back.
    Cancel(usize),
    /// A call was throttled: the gate slows down, and holds for this many milliseconds if
    /// the provider said how long to wait.
    Throttle(Option<u64>),
}

fn steps(burst: u64) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (1..=burst + 1, proptest::option::of(0u64..3_000))
            .prop_map(|(cost, deadline)| Step::Reserve { cost, deadline }),
        3 => (0u64..700).prop_map(Step::Advance),
        2 => any::<usize>().prop_map(Step::Cancel),
        1 => proptest::option::of(0u64..3_000).prop_map(Step::Throttle),
    ];
    proptest::collection::vec(step, 1..80)
}

/// The gate as plainly as it can be said, in nanoseconds since the start.
#[derive(Debug)]
struct Model {
    interval: u64,
    burst: u64,
    period: u64,
    /// The latest slowdown: extra nanoseconds per unit, fading over ten periods (at most a
    /// minute) from when.
    slowdown: (u64, u64),
    /// When the schedule ends: the next unit goes `interval` after it, less the burst's credit.
    tat: u64,
    held_until: u64,
    epoch: u64,
    /// Slots that a refund can still give back, latest last: `(id, schedule before it,
    /// whether its caller gave it back while a later one was still promised)`.
    refundable: Vec<(usize, u64, bool)>,
}

impl Model {
    fn interval(&self, now: u64) -> u64 {
        let (extra, since) = self.slowdown;
        let fade = self.fade();
        let left = fade.saturating_sub(now - since);
        self.interval + (u128::from(extra) * u128::from(left) / u128::from(fade)) as u64
    }

    fn reserve(&mut self, id: usize, now: u64, cost: u64, deadline: Option<u64>) -> Reply {
        if cost > self.burst {
            return Reply::OverBurst;
        }
        let from = self.tat.max(now);
        let next = from + self.interval(now) * cost;
        let at = (from + self.interval * cost)
            .saturating_sub(self.interval * self.burst)
            .max(now);
        if deadline.is_some_and(|deadline| at > deadline.max(now)) {
            return Reply::Limited(at - now);
        }
        self.refundable.push((id, self.tat, false));
        self.tat = next;
        Reply::Granted(at - now)
    }

    /// Whether the slot went back at once: it was the latest; then so do those before it
    /// given back earlier.
    fn refund(&mut self, id: usize, epoch: u64) -> bool {
        let Some(at) = (self.refundable.iter()).position(|&(slot, _, _)| slot == id) else {
            return false;
        };
        if epoch != self.epoch || self.refundable[at].2 {
            return false;
        }
        if at + 1 < self.refundable.len() {
            self.refundable[at].2 = true;
            return false;
        }
        let (_, before, _) = self.refundable.pop().expect("checked above");
        self.tat = before;
        while let Some(&(_, before, true)) = self.refundable.last() {
            self.refundable.pop();
            self.tat = before;
        }
        true
    }

    /// Ten periods, at most a minute.
    fn fade(&self) -> u64 {
        (10 * self.period).min(60_000_000_000)
    }

    /// 20 % slower than now, at most once a period (or once faded) and down to a sixteenth
    /// of the rate.
    fn slow_down(&mut self, now: u64) {
        let (extra, since) = self.slowdown;
        if extra > 0 && now - since < self.period.min(self.fade()) {
            return;
        }
        let slower = self.interval(now) * 5 / 4;
        let extra = (slower.min(16 * self.interval) - self.interval).min(self.fade());
        self.slowdown = (extra, now);
    }

    /// Whether the hold changed anything (a shorter one than in force does not).
    fn hold(&mut self, now: u64, wait: u64) -> bool {
        let until = now + wait;
        if until <= self.held_until {
            return false;
        }
        self.held_until = until;
        let used = self.tat.min(now + self.interval * self.burst);
        self.tat = (until + self.interval * (self.burst - 1)).max(used);
        self.epoch += 1;
        self.refundable.clear();
        true
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Granted(u64),
    Limited(u64),
    OverBurst,
}

/// A caller waiting for its slot.
#[derive(Debug)]
struct Waiter {
    id: usize,
    at: u64,
    cost: u64,
    slot: Slot,
    epoch: u64,
}

struct Run {
    gate: RateGate,
    model: Model,
    origin: Instant,
    waiting: Vec<Waiter>,
    /// Calls that started: `(when, units)`.
    started: Vec<(u64, u64)>,
    /// Throttles that took effect: `(made at, held until)`.
    holds: Vec<(u64, u64)>,
    ids: usize,
}

impl Run {
    fn now(&self) -> u64 {
        nanos(Instant::now() - self.origin)
    }

    fn reserve(&mut self, cost: u64, deadline: Option<u64>) -> Result<(), TestCaseError> {
        let now = self.now();
        let id = self.ids;
        self.ids += 1;
        let expected = self.model.reserve(id, now, cost, deadline);
        let epoch = self.model.epoch;
        let limit = deadline.map(|deadline| self.origin + Duration::from_nanos(deadline));
        match self.gate.reserve_slot(cost, limit) {
            Ok((wait, slot)) => {
                prop_assert_eq!(Reply::Granted(nanos(wait)), expected);
                let at = now + nanos(wait);
                if wait.is_zero() {
                    self.started.push((at, cost));
                } else {
                    self.waiting.push(Waiter {
                        id,
                        at,
                        cost,
                        slot,
                        epoch,
                    });
                }
            }
            Err(Rejected::RateLimited { retry_in }) => {
                prop_assert_eq!(Reply::Limited(nanos(retry_in)), expected)
            }
            Err(Rejected::OverBurst { .. }) => prop_assert_eq!(Reply::OverBurst, expected),
            Err(other) => prop_assert!(false, "a gate refused with {other:?}"),
        }
        Ok(())
    }

    /// Moves the clock to `until`, stopping at each waiter's slot on the way: it starts, or,
    /// revoked by a throttle, reserves again with no deadline as the execution does.
    async fn advance(&mut self, until: u64) -> Result<(), TestCaseError> {
        while let Some(next) = self
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, waiter)| waiter.at <= until)
            .min_by_key(|(_, waiter)| waiter.at)
            .map(|(index, _)| index)
        {
            let waiter = self.waiting.remove(next);
            tokio::time::advance(Duration::from_nanos(waiter.at - self.now())).await;
            let revoked = waiter.epoch != self.model.epoch;
            prop_assert_eq!(self.gate.is_revoked(waiter.slot), revoked);
            if revoked {
                self.reserve(waiter.cost, None)?;
            } else {
                self.started.push((waiter.at, waiter.cost));
            }
        }
        tokio::time::advance(Duration::from_nanos(until - self.now())).await;
        Ok(())
    }

    fn cancel(&mut self, pick: usize) -> Result<(), TestCaseError> {
        if self.waiting.is_empty() {
            return Ok(());
        }
        let waiter = self.waiting.remove(pick % self.waiting.len());
        let expected = self.model.refund(waiter.id, waiter.epoch);
        prop_assert_eq!(
            self.gate.refund(waiter.slot),
            expected,
            "refund of {:?}",
            waiter
        );
        prop_assert!(!self.gate.refund(waiter.slot), "a slot went back twice");
        Ok(())
    }

    fn throttle(&mut self, wait: Option<u64>) {
        let now = self.now();
        self.gate.slow_down();
        self.model.slow_down(now);
        if let Some(wait) = wait {
            self.gate.hold(Duration::from_nanos(wait));
            if self.model.hold(now, wait) {
                self.holds.push((now, now + wait));
            }
        }
    }

    /// The promises, over what started.
    fn check(&self, count: u64, burst: u64, period: u64) -> Result<(), TestCaseError> {
        let mut started = self.started.clone();
        started.sort();
        for (i, &(from, _)) in started.iter().enumerate() {
            let window: u64 = started[i..]
                .iter()
                .take_while(|(at, _)| at - from < period)
                .map(|(_, units)| units)
                .sum();
            prop_assert!(
                window < count + burst,
                "{} units started within a period from {} ns: {:?}",
                window,
                from,
                started
            );
            let instant: u64 = started[i..]
                .iter()
                .take_while(|(at, _)| *at == from)
                .map(|(_, units)| units)
                .sum();
            prop_assert!(instant <= burst, "{} units at once at {} ns", instant, from);
        }
        for &(made, until) in &self.holds {
            let during = started.iter().find(|(at, _)| *at > made && *at < until);
            prop_assert!(
                during.is_none(),
                "{:?} started during the hold from {} to {} ns",
                during,
                made,
                until
            );
        }
        Ok(())
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).expect("the test stays within u64 nanoseconds")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_gate_agrees_with_its_model_and_keeps_its_promises(
        (count, burst, steps) in (1u64..12, 1u64..5)
            .prop_flat_map(|(count, burst)| (Just(count), Just(burst), steps(burst)))
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a paused runtime");
        runtime.block_on(async {
            // A period that no count divides evenly: the interval's rounding is part of what
            // is checked.
            let period = Duration::from_millis(1000);
            let gate = RateGate::new(count, period, burst).expect("a valid gate");
            let interval = gate.interval;
            let mut run = Run {
                gate,
                model: Model {
                    interval,
                    burst,
                    period: nanos(period),
                    slowdown: (0, 0),
                    tat: 0,
                    held_until: 0,
                    epoch: 0,
                    refundable: Vec::new(),
                },
                origin: Instant::now(),
                waiting: Vec::new(),
                started: Vec::new(),
                holds: Vec::new(),
                ids: 0,
            };
            for step in steps {
                match step {
                    Step::Reserve { cost, deadline } => {
                        let deadline = deadline.map(|ms| run.now() + ms * 1_000_000);
                        run.reserve(cost, deadline)?;
                    }
                    Step::Advance(ms) => run.advance(run.now() + ms * 1_000_000).await?,
                    Step::Cancel(pick) => run.cancel(pick)?,
                    Step::Throttle(ms) => run.throttle(ms.map(|ms| ms * 1_000_000)),
                }
            }
            while let Some(last) = run.waiting.iter().map(|waiter| waiter.at).max() {
                run.advance(last).await?;
            }
            run.check(count, burst, nanos(period))
        })?;
    }
}
