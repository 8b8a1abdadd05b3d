//! The checker: what the world did so far, held against the invariants (`invariants.rs`)
//! at every step.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::{Ceiling, TARGETS};
use crate::provider::{Answer, SimError};

mod gates;
mod heard;
mod invariants;
mod keys;
mod served;
mod streams;
mod tuned;
mod turns;
use heard::Ledger;
pub(crate) use invariants::{Inv, INVARIANTS};
use streams::Seen;

/// Whether every step is printed as it happens (`--trace`, with `--seed`).
pub(crate) static TRACE: AtomicBool = AtomicBool::new(false);

/// A broken invariant.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) inv: Inv,
    pub(crate) at: Duration,
    pub(crate) message: String,
    pub(crate) caller: Option<usize>,
    /// The trace up to the failure.
    pub(crate) trace: Vec<String>,
}

/// A call's identity across its invocations: the caller and the depth (0 outer, 1 nested).
pub(crate) type Logical = (usize, u8);

/// Which gate an attempt goes through: (policy: 0 outer, 1 inner; target for a gate per key;
/// the token gate).
pub(crate) type GateScope = (u8, Option<usize>, bool);

/// What the checks need of one invocation of a policy's run.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) logical: Logical,
    pub(crate) instance: usize,
    /// The invocation of the outer call this one is nested in, and whether it draws from its
    /// allowance.
    pub(crate) root: Option<(usize, bool)>,
    pub(crate) retry: u32,
    pub(crate) retry_after_cap: Duration,
    pub(crate) started: Instant,
    pub(crate) deadline: Option<Instant>,
    /// Where the caller gives up, bounding the call's end when no deadline does.
    pub(crate) bound: Option<Instant>,
    /// The declared ceilings of this policy's gates.
    pub(crate) gates: Vec<Ceiling>,
    /// What each attempt takes of a token gate.
    pub(crate) cost: u64,
    pub(crate) shared: bool,
    /// An outer call with no nested call and no hedge: `Operation::attempt` counts its own
    /// attempts alone.
    pub(crate) simple: bool,
    pub(crate) routed: bool,
    /// The policy it goes through: 0 outer, 1 inner.
    pub(crate) policy: u8,
    /// A streaming call, and the longest gap its committed stream allows between items.
    pub(crate) stream: bool,
    pub(crate) idle: Option<Duration>,
    /// Its policy was switched on when it started.
    pub(crate) enabled: bool,
}

#[derive(Debug, Default)]
struct State {
    attempts: u32,
    /// Retries drawn by this call and the calls nested in it that draw from it.
    tree_retries: u32,
    /// Per target: the earliest next call the Retry-After allows, and when it was asked.
    earliest: [Option<(Instant, Instant)>; 3],
    banned: [bool; 3],
    ended: bool,
    /// Ended by its caller dropping it.
    dropped: bool,
    /// What its consumer saw of its stream.
    seen: Seen,
    /// A panic reached its caller.
    panicked: bool,
}

pub(crate) type Trouble = (
    Instant,
    Option<Instant>,
    BTreeMap<GateScope, BTreeSet<usize>>,
);

#[derive(Debug)]
pub(crate) struct Checker {
    origin: Instant,
    pub(crate) exercised: [u64; INVARIANTS.len()],
    pub(crate) failures: Vec<Failure>,
    trace: Vec<String>,
    calls: Vec<(Call, State)>,
    keys: BTreeMap<Logical, String>,
    owners: BTreeMap<String, Logical>,
    /// Starts per (instance, scope), in order, with the units each took.
    gates: BTreeMap<(usize, GateScope), VecDeque<(Instant, u64)>>,
    /// Starts per scope over every instance, with the instance and the units.
    across: BTreeMap<GateScope, VecDeque<(Instant, usize, u64)>>,
    /// Spells of store trouble: from, to (open while it lasts), and per gate the instances
    /// that knew of each other when it began.
    trouble: Vec<Trouble>,
    /// Spells of a partition, with the instances cut off.
    cuts: Vec<(Trouble, BTreeSet<usize>)>,
    /// The number of the last attempt the runtime started, per operation id.
    numbers: BTreeMap<String, u32>,
    /// Last transition heard per (instance, policy, breaker).
    breakers: BTreeMap<(usize, u8, String), String>,
    ledger: Ledger,
}

impl Checker {
    /// A checker for a world that starts at `origin`, its policies' retry budgets these.
    pub(crate) fn new(origin: Instant, budgets: [Option<(f64, f64)>; 2]) -> Checker {
        Checker {
            origin,
            exercised: [0; INVARIANTS.len()],
            failures: Vec::new(),
            trace: Vec::new(),
            calls: Vec::new(),
            keys: BTreeMap::new(),
            owners: BTreeMap::new(),
            gates: BTreeMap::new(),
            across: BTreeMap::new(),
            trouble: Vec::new(),
            cuts: Vec::new(),
            breakers: BTreeMap::new(),
            numbers: BTreeMap::new(),
            ledger: Ledger::new(budgets),
        }
    }

    fn at(&self, now: Instant) -> Duration {
        now - self.origin
    }

    pub(crate) fn log(&mut self, line: impl AsRef<str>) {
        let at = self.at(Instant::now());
        let line = format!("{:>10.3}s {}", at.as_secs_f64(), line.as_ref());
        if TRACE.load(Ordering::Relaxed) {
            println!("{line}");
        }
        self.trace.push(line);
    }

    fn exercise(&mut self, inv: Inv) {
        self.exercised[inv as usize] += 1;
    }

    pub(crate) fn fail(&mut self, inv: Inv, caller: Option<usize>, message: String) {
        self.log(format!("!! {}: {message}", INVARIANTS[inv as usize].name));
        if self.failures.iter().any(|failure| failure.inv == inv) {
            return;
        }
        self.failures.push(Failure {
            inv,
            at: self.at(Instant::now()),
            message,
            caller,
            trace: self.trace.clone(),
        });
    }

    fn check(
        &mut self,
        inv: Inv,
        holds: bool,
        caller: Option<usize>,
        message: impl FnOnce() -> String,
    ) {
        self.exercise(inv);
        if !holds {
            self.fail(inv, caller, message());
        }
    }

    pub(crate) fn begin(&mut self, call: Call) -> usize {
        let line = format!(
            "c{}{} i{} begins (retry {}, deadline {:?}{})",
            call.logical.0,
            if call.logical.1 > 0 { ".n" } else { "" },
            call.instance,
            call.retry,
            call.deadline.map(|d| d - call.started),
            match call.gates.iter().any(|gate| gate.tokens) {
                true => format!(", cost {}", call.cost),
                false => String::new(),
            }
        );
        self.log(line);
        self.calls.push((call, State::default()));
        self.calls.len() - 1
    }

    /// An attempt reached the provider `target` (its body's first poll), through `breaker`
    /// (which counts calls slower than its duration as failures).
    pub(crate) fn attempt(
        &mut self,
        index: usize,
        target: usize,
        id: Option<String>,
        number: Option<u32>,
        breaker: Option<(String, Option<Duration>)>,
    ) {
        let now = Instant::now();
        let (call, state) = &mut self.calls[index];
        state.attempts += 1;
        let attempts = state.attempts;
        let caller = Some(call.logical.0);
        let logical = call.logical;
        let (retry, instance, deadline, root, started) = (
            call.retry,
            call.instance,
            call.deadline,
            call.root,
            call.started,
        );
        let (simple, call_policy) = (call.simple, call.policy);
        let earliest = state.earliest[target];
        let banned = state.banned[target];
        let name = TARGETS[target];
        self.log(format!(
            "c{}{} i{instance} attempt {attempts} -> {name} (id {})",
            logical.0,
            if logical.1 > 0 { ".n" } else { "" },
            id.as_deref().unwrap_or("none")
        ));
        // Attempts: 1 + retry for a call owning its allowance; a nested call drawing from its
        // root's is bounded by the root's tree count below.
        let bound = match root {
            Some((root, true)) => 1 + retry.max(self.calls[root].0.retry),
            _ => 1 + retry,
        };
        self.check(Inv::Attempts, attempts <= bound, caller, || {
            format!("attempt {attempts} of a call with retry {retry} (bound {bound})")
        });
        if attempts == 1 {
            self.first(instance, call_policy, now);
        }
        if let Some(id) = &id {
            self.told_before(index, name, id);
        }
        let numbered = (id.clone().zip(number)).filter(|_| simple);
        self.flight(index, target, breaker, numbered);
        if attempts > 1 {
            let owner = match root {
                Some((root, true)) if self.calls[root].0.retry > 0 => Some(root),
                Some(_) => None,
                None if retry > 0 => Some(index),
                None => None,
            };
            if let Some(owner) = owner {
                self.calls[owner].1.tree_retries += 1;
                let (drawn, allowed) =
                    (self.calls[owner].1.tree_retries, self.calls[owner].0.retry);
                self.check(Inv::Allowance, drawn <= allowed, caller, || {
                    format!("the operation drew {drawn} retries with retry = {allowed} (nested calls included)")
                });
            }
        }
        if let Some(deadline) = deadline {
            self.check(Inv::Deadline, now < deadline, caller, || {
                format!(
                    "an attempt started {:?} after the call's start, its deadline {:?}",
                    now - started,
                    deadline - started
                )
            });
        }
        // An attempt started at the instant of the answer was decided before it (a hedge
        // whose timer fired with the answer).
        if let Some((earliest, _)) = earliest.filter(|&(_, asked)| asked < now) {
            self.check(Inv::RetryAfter, now >= earliest, caller, || {
                format!(
                    "{name} called {:?} before the Retry-After it asked for ended",
                    earliest - now
                )
            });
        }
        // The body reads the number the runtime gave the attempt it runs in.
        let runtime = id.as_ref().and_then(|id| self.numbers.get(id)).copied();
        if simple && runtime.is_some() {
            self.check(Inv::AttemptNumber, number == runtime, caller, || {
                format!("its attempt {attempts} read Operation::attempt() = {number:?}, started by the runtime as {runtime:?}")
            });
        }
        if banned {
            self.fail(
                Inv::MovedOn,
                caller,
                format!("{name} called again after it moved the operation on"),
            );
        }
        if let Some(id) = id {
            self.exercise(Inv::IdempotencyKey);
            match self.keys.get(&logical) {
                Some(known) if *known != id => {
                    let known = known.clone();
                    self.fail(
                        Inv::IdempotencyKey,
                        caller,
                        format!("the call's attempts carry two keys: {known} then {id}"),
                    );
                }
                Some(_) => {}
                None => {
                    if let Some(other) = self.owners.get(&id).copied() {
                        self.fail(
                            Inv::IdempotencyKey,
                            caller,
                            format!("key {id} of caller {other:?} reused by caller {logical:?}"),
                        );
                    }
                    self.keys.insert(logical, id.clone());
                    self.owners.insert(id, logical);
                }
            }
        }
        self.gate_start(index, instance, target, now, caller);
    }

    /// The provider answered an attempt.
    pub(crate) fn answer(&mut self, index: usize, target: usize, answer: &Answer) {
        let now = Instant::now();
        self.landed(index, target, &answer.result);
        let (call, state) = &mut self.calls[index];
        let (cap, logical) = (call.retry_after_cap, call.logical);
        match &answer.result {
            Err(SimError::Throttled(wait)) | Err(SimError::Transient(Some(wait))) => {
                let until = now + (*wait).min(cap);
                let later = state.earliest[target].map_or(until, |(e, _)| e.max(until));
                state.earliest[target] = Some((later, now));
            }
            Err(SimError::MovesOn) => {
                state.banned[target] = true;
                self.exercise(Inv::MovedOn);
            }
            _ => {}
        }
        let stated = answer
            .stated
            .map_or(String::new(), |(limit, remaining, reset)| {
                format!(" (states limit {limit}, {remaining} left, reset in {reset:?})")
            });
        self.log(format!(
            "c{}{} answer from {}: {:?}{stated}",
            logical.0,
            if logical.1 > 0 { ".n" } else { "" },
            TARGETS[target],
            answer.result
        ));
    }

    /// The caller's future ended (returned or dropped).
    pub(crate) fn end(&mut self, index: usize, outcome: &str) {
        let now = Instant::now();
        let slack = Duration::from_millis(1);
        let (call, state) = &mut self.calls[index];
        state.ended = true;
        state.panicked = outcome.starts_with("panicked");
        state.dropped = outcome.starts_with("dropped") || state.panicked;
        let foreign = outcome.starts_with("panicked (not its own)");
        let (logical, started, deadline, bound) =
            (call.logical, call.started, call.deadline, call.bound);
        self.log(format!(
            "c{}{} ends after {:?}: {outcome}",
            logical.0,
            if logical.1 > 0 { ".n" } else { "" },
            now - started
        ));
        self.check(Inv::OwnPanics, !foreign, Some(logical.0), || {
            format!("a panic not the body's or a listener's reached the caller: {outcome}")
        });
        // A nested call dropped by its parent's attempt ends when the runtime drops that
        // attempt's body: a check of its own.
        let inv = if logical.1 > 0 && outcome == "dropped" {
            Inv::DroppedAtOnce
        } else {
            Inv::NoHang
        };
        if let Some(deadline) = deadline {
            self.check(inv, now <= deadline + slack, Some(logical.0), || {
                format!("the call ended {:?} after its deadline", now - deadline)
            });
        }
        if let Some(bound) = bound.filter(|_| inv == Inv::NoHang) {
            self.check(
                Inv::WorstCase,
                now <= bound + slack,
                Some(logical.0),
                || {
                    format!(
                        "the call ended {:?} after its worst case ({:?})",
                        now - bound,
                        bound - started
                    )
                },
            );
        }
    }

    /// Calls not ended when the world stopped waiting for them.
    pub(crate) fn unended(&mut self) {
        let now = Instant::now();
        let hung: Vec<_> = self
            .calls
            .iter()
            .filter(|(_, state)| !state.ended)
            .map(|(call, _)| (call.logical, now - call.started))
            .collect();
        self.exercise(Inv::NoHang);
        if let Some((logical, since)) = hung.first() {
            let message = format!(
                "{} calls never ended; caller {} ran for {since:?}",
                hung.len(),
                logical.0
            );
            self.fail(Inv::NoHang, Some(logical.0), message);
        }
    }

    /// A call's deadline and the bound its worst case or its caller sets on its end.
    pub(crate) fn limits_of(&self, index: usize) -> (Option<Instant>, Option<Instant>) {
        let call = &self.calls[index].0;
        (call.deadline, call.bound)
    }

    /// An attempt reached its provider through a breaker: `open` says which, if it was open
    /// and cooling (and not held by the enclosing attempt).
    pub(crate) fn breaker_open(&mut self, index: usize, open: Option<(String, Duration)>) {
        let caller = Some(self.calls[index].0.logical.0);
        self.check(Inv::OpenLetsNoneThrough, open.is_none(), caller, || {
            let (name, left) = open.clone().unwrap_or_default();
            format!("a call went through breaker {name}, open for {left:?} more")
        });
    }

    pub(crate) fn held(&mut self, holds: bool, what: impl FnOnce() -> String) {
        self.check(Inv::NothingHeld, holds, None, what);
    }

    pub(crate) fn recovers(&mut self, holds: bool, what: impl FnOnce() -> String) {
        self.check(Inv::Recovers, holds, None, what);
    }

    /// A report of the first failure: the lines of its caller, and the last ones before it.
    pub(crate) fn render(failure: &Failure) -> String {
        let mut out = String::new();
        let tag = failure.caller.map(|caller| format!("c{caller}"));
        let mine: Vec<_> = failure
            .trace
            .iter()
            .filter(|line| {
                tag.as_ref().is_some_and(|tag| {
                    line.split_whitespace()
                        .nth(1)
                        .is_some_and(|word| word == tag || word.starts_with(&format!("{tag}.")))
                })
            })
            .collect();
        let tail = failure.trace.len().saturating_sub(12);
        if !mine.is_empty() {
            let _ = writeln!(out, "  the caller's steps:");
            for line in mine.iter().rev().take(30).rev() {
                let _ = writeln!(out, "    {line}");
            }
        }
        let _ = writeln!(out, "  the last steps:");
        for line in &failure.trace[tail..] {
            let _ = writeln!(out, "    {line}");
        }
        out
    }
}
