//! What the listeners heard, held against what the bodies and the providers saw: every
//! attempt told before it runs and ended once, routed to the target it is sent to and never
//! to one the route passed over, its outcome the provider's answer; every retry within the
//! process's budget; every breaker opened by a failure, never by a throttle alone.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::turns::Served;
use super::{Checker, Inv};
use crate::ear::{Heard, Who};
use crate::provider::SimError;

/// The budget's buckets: one a second, ten in its window (`RetryBudget`).
const BUDGET_SECONDS: i64 = 10;

/// An attempt in flight, as the provider's answer needs it.
#[derive(Debug)]
pub(crate) struct Flight {
    /// The breaker it goes through (on its instance) and the breaker's generation then.
    breaker: Option<(String, u64)>,
    /// When it started, and the time past which its breaker counts a call as slow.
    started: Instant,
    slow: Option<Duration>,
    /// Its operation and number, for an operation whose attempts run one at a time.
    numbered: Option<(String, u32)>,
}

#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Per operation: attempts started and ended as the events tell, and bodies run.
    ops: BTreeMap<String, [u32; 3]>,
    /// Per operation and attempt number: the outcome its provider's answer calls for.
    answered: BTreeMap<(String, u32), &'static str>,
    /// Per operation and target: the times it was routed there and not yet called, and whether
    /// the last word on it was a skip.
    routes: BTreeMap<(String, String), (u32, bool)>,
    /// The operations a listener's panic went through.
    unwound: BTreeSet<String>,
    /// The operations that called, by instance and policy.
    called: BTreeSet<(usize, u8, String)>,
    /// Per instance and policy with a budget: per second since the origin, first attempts
    /// and draws (retries and hedges).
    budgets: BTreeMap<(usize, u8), BTreeMap<i64, (u32, u32)>>,
    /// The budget of each policy: ratio and retries a second.
    budget_of: [Option<(f64, f64)>; 2],
    /// Per instance, policy and breaker (two policies' breakers per key have the same names):
    /// attempts through it that may have failed since it last closed or half-opened, and its
    /// generation (one per such transition).
    failing: BTreeMap<(usize, u8, String), (u32, u64)>,
    /// Per invocation and target: its attempts in flight.
    flights: BTreeMap<(usize, usize), Vec<Flight>>,
    /// What the listeners told, by policy and what: `attempts`, `retries`, `sent gpt`,
    /// `skipped claude`; for the metrics to agree with.
    pub(super) told: BTreeMap<(u8, String), u64>,
    /// The waits served in turn, in the order heard.
    pub(super) served: Vec<Served>,
}

impl Ledger {
    /// For policies whose retry budgets are these.
    pub(crate) fn new(budget_of: [Option<(f64, f64)>; 2]) -> Ledger {
        Ledger {
            budget_of,
            ..Ledger::default()
        }
    }

    /// An attempt through `breaker` may have failed (a stream's, after its commit).
    pub(crate) fn failing(&mut self, breaker: (usize, u8, String)) {
        self.failing.entry(breaker).or_default().0 += 1;
    }
}

/// The attempt's outcome a provider's answer calls for.
fn outcome(result: &Result<u32, SimError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(SimError::Throttled(_)) => "throttled",
        Err(SimError::Transient(_)) => "transient",
        Err(SimError::Permanent | SimError::MovesOn) => "permanent",
        Err(SimError::Rejected(rejected)) => rejected.kind(),
    }
}

impl Checker {
    /// One event heard by `who` at `at`.
    pub(crate) fn heard(&mut self, who: Who, at: Instant, heard: Heard, breakers: bool) {
        let (instance, which) = who;
        match heard {
            Heard::Transition(breaker, from, to) => {
                // A shared breaker's peers' transitions reach the global listeners only: its
                // chain is checked where no store shares it.
                if breakers {
                    self.transition(instance, which, &breaker, &from, &to);
                    self.opened((instance, which, breaker), &to);
                } else {
                    self.log(format!("i{instance} breaker {breaker}: {from} -> {to}"));
                }
            }
            Heard::Started(id, attempt) => {
                self.numbers.insert(id.clone(), attempt);
                self.ledger.called.insert((instance, which, id.clone()));
                self.ledger.ops.entry(id).or_default()[0] += 1;
                *self.told(which, "attempts") += 1;
            }
            Heard::Ended(id, attempt, outcome) => self.ended(id, attempt, outcome),
            Heard::Routed(id, target) => {
                *self.told(which, &format!("sent {target}")) += 1;
                let route = self.ledger.routes.entry((id, target)).or_default();
                *route = (route.0 + 1, false);
            }
            Heard::Skipped(id, target, kind) => {
                self.log(format!("i{instance} skipped {target}: {kind}"));
                *self.told(which, &format!("skipped {target}")) += 1;
                self.ledger.routes.entry((id, target)).or_default().1 = true;
            }
            Heard::Drew(id, line) => {
                self.log(format!("i{instance} {line}"));
                *self.told(which, "retries") += 1;
                if line.starts_with("hedge") {
                    *self.told(which, "hedges") += 1;
                }
                // An operation that has not called yet draws nothing from the budget.
                if id.is_some_and(|id| self.ledger.called.contains(&(instance, which, id))) {
                    self.drew(instance, which, at);
                }
            }
            Heard::Line(line) => self.log(format!("i{instance} {line}")),
            Heard::Served(id, wait, class, waited, promoted) => {
                self.log(format!(
                    "i{instance} served {class:?} for its {wait} after {waited:?}{}",
                    if promoted { " (promoted)" } else { "" }
                ));
                self.ledger.served.push(Served {
                    who,
                    id,
                    wait,
                    class,
                    joined: at - waited,
                    at,
                    promoted,
                });
            }
            Heard::Panics(id) => {
                self.log(format!("i{instance} a listener panics"));
                self.unwinds(id);
            }
        }
    }

    /// A breaker's transition heard by an instance's listener: it starts where the last ended.
    fn transition(&mut self, instance: usize, which: u8, breaker: &str, from: &str, to: &str) {
        self.log(format!("i{instance} breaker {breaker}: {from} -> {to}"));
        let legal = matches!(
            (from, to),
            ("closed", "open")
                | ("open", "half-open")
                | ("half-open", "closed")
                | ("half-open", "open")
        );
        let key = (instance, which, breaker.to_owned());
        let last = self.breakers.get(&key).cloned();
        let follows = last.as_deref().is_none_or(|last| last == from);
        self.check(Inv::Transitions, legal && follows, None, || {
            format!("{breaker}: {from} -> {to} (last heard: {last:?})")
        });
        self.breakers.insert(key, to.to_owned());
    }

    /// A panic goes through operation `id`: an attempt it unwinds through is not told ended,
    /// and one whose start a listener's panic interrupts does not run.
    pub(crate) fn unwinds(&mut self, id: String) {
        self.log(format!("a panic goes through operation {id}"));
        self.ledger.unwound.insert(id);
    }

    fn told(&mut self, which: u8, what: &str) -> &mut u64 {
        self.ledger
            .told
            .entry((which, what.to_owned()))
            .or_default()
    }

    fn second(&self, at: Instant) -> i64 {
        (at - self.origin).as_secs() as i64
    }

    fn ended(&mut self, id: String, attempt: u32, outcome: &'static str) {
        let counts = self.ledger.ops.entry(id.clone()).or_default();
        counts[1] += 1;
        let [started, ended, _] = *counts;
        self.check(Inv::EventsAgree, ended <= started, None, || {
            format!("operation {id}: {ended} attempts ended, {started} started")
        });
        if let Some(answered) = self.ledger.answered.remove(&(id.clone(), attempt)) {
            self.check(Inv::EventsAgree, outcome == answered, None, || {
                format!("operation {id}: attempt {attempt} ended {outcome}, its provider answered {answered}")
            });
        }
    }

    /// An attempt's body runs: it was told, and routed to its target if its call is routed.
    pub(crate) fn told_before(&mut self, index: usize, target: &str, id: &str) {
        let caller = Some(self.calls[index].0.logical.0);
        let counts = self.ledger.ops.entry(id.to_owned()).or_default();
        counts[2] += 1;
        let [started, _, ran] = *counts;
        self.check(Inv::EventsAgree, ran <= started, caller, || {
            format!("operation {id}: {ran} attempts ran, {started} told as started")
        });
        if !self.calls[index].0.routed {
            return;
        }
        let route = (self.ledger.routes)
            .entry((id.to_owned(), target.to_owned()))
            .or_default();
        let (sent, skipped) = *route;
        route.0 = sent.saturating_sub(1);
        self.check(Inv::SkippedNoCall, sent > 0 || !skipped, caller, || {
            format!("{target} called after the route passed over it")
        });
        self.check(Inv::EventsAgree, sent > 0 || skipped, caller, || {
            format!("{target} called with no Routed event for it")
        });
    }

    /// An attempt goes to the provider through `breaker` (which counts calls slower than
    /// `slow` as failures): it may fail until it answers.
    pub(crate) fn flight(
        &mut self,
        index: usize,
        target: usize,
        breaker: Option<(String, Option<Duration>)>,
        numbered: Option<(String, u32)>,
    ) {
        let (instance, policy) = (self.calls[index].0.instance, self.calls[index].0.policy);
        let slow = breaker.as_ref().and_then(|(_, slow)| *slow);
        let breaker = breaker.map(|(name, _)| {
            let key = (instance, policy, name.clone());
            let failing = self.ledger.failing.entry(key).or_default();
            failing.0 += 1;
            (name, failing.1)
        });
        let flight = Flight {
            breaker,
            started: Instant::now(),
            slow,
            numbered,
        };
        self.ledger
            .flights
            .entry((index, target))
            .or_default()
            .push(flight);
    }

    /// The provider answered an attempt in flight: what the attempt's end must tell, and
    /// whether it may count toward opening a breaker.
    pub(crate) fn landed(&mut self, index: usize, target: usize, result: &Result<u32, SimError>) {
        let (instance, policy) = (self.calls[index].0.instance, self.calls[index].0.policy);
        let Some(flights) = self.ledger.flights.get_mut(&(index, target)) else {
            return;
        };
        if flights.is_empty() {
            return;
        }
        let flight = flights.remove(0);
        let outcome = outcome(result);
        if let Some(numbered) = flight.numbered {
            self.ledger.answered.insert(numbered, outcome);
        }
        let slow = flight
            .slow
            .is_some_and(|slow| flight.started.elapsed() >= slow && outcome != "throttled");
        // A stream connected may still fail before its commit.
        let connected = outcome == "ok" && self.calls[index].0.stream;
        let failure = outcome == "transient" || slow || connected;
        if let Some((name, generation)) = flight.breaker.filter(|_| !failure) {
            let failing = (self.ledger.failing)
                .entry((instance, policy, name))
                .or_default();
            if failing.1 == generation {
                failing.0 = failing.0.saturating_sub(1);
            }
        }
    }

    /// A breaker's transition: an opening follows an attempt that may have failed since it
    /// last closed or half-opened, a throttle never being one.
    fn opened(&mut self, breaker: (usize, u8, String), to: &str) {
        let failing = self.ledger.failing.entry(breaker.clone()).or_default();
        let (count, _) = *failing;
        let breaker = breaker.2;
        if to != "open" {
            *failing = (0, failing.1 + 1);
            return;
        }
        self.check(Inv::ThrottleNoFailure, count > 0, None, || {
            format!("{breaker} opened with no attempt through it failed since it last closed or half-opened (throttles, permanent errors and calls not slow only)")
        });
    }

    /// A first attempt of a call through policy `which` of `instance`, for its budget.
    pub(crate) fn first(&mut self, instance: usize, which: u8, at: Instant) {
        if self.ledger.budget_of[which as usize].is_none() {
            return;
        }
        let second = self.second(at);
        let budget = self.ledger.budgets.entry((instance, which)).or_default();
        budget.entry(second).or_default().0 += 1;
    }

    /// A retry or hedge drawn from the budget of policy `which` of `instance`: within it.
    fn drew(&mut self, instance: usize, which: u8, at: Instant) {
        let Some((ratio, per_second)) = self.ledger.budget_of[which as usize] else {
            return;
        };
        let second = self.second(at);
        let budget = self.ledger.budgets.entry((instance, which)).or_default();
        budget.entry(second).or_default().1 += 1;
        let (firsts, draws) = budget
            .range(second - BUDGET_SECONDS + 1..=second)
            .fold((0, 0), |(f, d), (_, &(first, drew))| (f + first, d + drew));
        let allowed = ratio * f64::from(firsts) + per_second * BUDGET_SECONDS as f64;
        self.check(
            Inv::Budget,
            f64::from(draws) <= allowed + 1e-9,
            None,
            || format!("instance {instance}: {draws} retries and hedges drawn within 10 s of {firsts} first attempts (budget {ratio} of them + {per_second}/s)"),
        );
    }

    /// At quiescence: every attempt told as started ended, and ran its body; but in an
    /// operation a panic went through (its own, or its caller's: the unwinding drops every
    /// attempt the caller's call holds).
    pub(crate) fn all_told(&mut self) {
        let ops = std::mem::take(&mut self.ledger.ops);
        let mut unwound = std::mem::take(&mut self.ledger.unwound);
        let panicked: BTreeSet<usize> = (self.calls.iter())
            .filter(|(_, state)| state.panicked)
            .map(|(call, _)| call.logical.0)
            .collect();
        unwound.extend(
            (self.keys.iter())
                .filter(|((caller, _), _)| panicked.contains(caller))
                .map(|(_, id)| id.clone()),
        );
        for (id, [started, ended, ran]) in ops.iter().filter(|(id, _)| !unwound.contains(*id)) {
            self.check(Inv::EventsAgree, started == ended, None, || {
                format!("operation {id}: {started} attempts started, {ended} ended")
            });
            self.check(Inv::EventsAgree, started == ran, None, || {
                format!("operation {id}: {started} attempts told as started, {ran} ran")
            });
        }
        self.ledger.ops = ops;
        self.ledger.unwound = unwound;
    }

    /// At quiescence: the counters the policies reported agree with what their listeners
    /// heard, and count the calls that ended (and may count one its caller dropped while
    /// another caller still awaited it).
    pub(crate) fn metered(&mut self, counted: &BTreeMap<(u8, String), u64>) {
        let keys: BTreeSet<(u8, String)> = (counted.keys())
            .chain(self.ledger.told.keys())
            .filter(|(_, what)| what != "calls")
            .cloned()
            .collect();
        for key in keys {
            let told = self.ledger.told.get(&key).copied().unwrap_or(0);
            let metered = counted.get(&key).copied().unwrap_or(0);
            self.check(Inv::MetricsAgree, told == metered, None, || {
                format!(
                    "policy {}: {} counted {metered}, the listeners heard {told}",
                    key.0, key.1
                )
            });
        }
        for which in 0..2 {
            let calls = self.calls.iter().filter(|(call, _)| call.policy == which);
            let (begun, ended) = calls.fold((0, 0), |(begun, ended), (_, state)| {
                (begun + 1, ended + u64::from(state.ended && !state.dropped))
            });
            let metered = counted
                .get(&(which, "calls".to_owned()))
                .copied()
                .unwrap_or(0);
            self.check(
                Inv::MetricsAgree,
                (ended..=begun).contains(&metered),
                None,
                || format!("policy {which}: resil_calls_total counted {metered}, {ended} calls ended of {begun} begun"),
            );
        }
    }
}
