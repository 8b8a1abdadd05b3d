//! [`Route`]: one operation over several targets, the values of a keyed policy's key (models,
//! providers, regions), each with its own breaker, bulkhead and gates.
//!
//! Before each attempt the route looks at its targets in order, from the one after the last
//! it tried, wrapping around. A target whose breaker is open (or whose probe is out), whose
//! gate has no slot within the deadline, or whose bulkhead is full with no place in its queue
//! is skipped: no attempt, no retry spent. Of the others it takes one not yet tried before
//! one that failed, one that calls at once before one that would wait for its slot or its
//! queue, then the first in order. The choice after a failure is made then, from what the
//! targets say then: moving to a target not yet tried waits nothing (a throttle never waits
//! while another target admits); going back to one that failed waits the backoff and the
//! Retry-After that target asked for (each target keeps its own: one still waiting for it
//! counts as one that would wait), as a retry would. The operation stays one: one deadline,
//! one retry allowance, one id.

use std::time::Duration;

use tokio::time::Instant;

use super::attempt::Lost;
use super::retry::Routing;
use super::{Execution, Next, Outcome, Progress};
use crate::deadline::{later, Limits};
use crate::events::{Event, GiveUp};
use crate::key::{Key, Name};
use crate::policy::{BreakerRef, Scope, Settings};
use crate::registry::Held;
use crate::{Rejected, Transient};

/// An operation routed over several targets: see [`crate::Policy::run_routed`], which drives one,
/// and `route = model in [...]` on `#[resilient]`, which expands to one.
///
/// Ask [`Route::target`] for each attempt's target (it waits there when it goes back to a
/// target that failed), then run the attempt on [`Route::execution`]:
///
/// ```
/// use resil_runtime::{Next, Policy, Rejected};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder().retry(2).breaker_per_key("model", 5, std::time::Duration::from_secs(30)).build().unwrap();
/// let mut route = policy.route("gpt-4o", ["claude-sonnet"]);
/// let outcome = loop {
///     let model = match route.target().await {
///         Ok(model) => *model,
///         Err(outcome) => break outcome,
///     };
///     let attempt = async move {
///         if model == "gpt-4o" { Err(Rejected::Incomplete) } else { Ok(model) }
///     };
///     if let Next::Done(outcome) = route.execution().attempt(attempt).await {
///         break outcome;
///     }
/// };
/// assert_eq!(outcome.into_result(), Ok("claude-sonnet"));
/// # }
/// ```
pub struct Route<'p, Q, K: ?Sized, E> {
    settings: &'p Settings,
    /// The key a target's state is kept under.
    key: fn(&Q) -> &K,
    execution: Execution<'p, E>,
    targets: Vec<Target<Q>>,
    /// The target of the attempt in progress, or of the last one.
    current: usize,
    started: bool,
    /// The last attempt waited before it: a target that refuses it then (see
    /// [`Route::draw`]) does not make the next wait the backoff again.
    waited: bool,
}

struct Target<Q> {
    value: Q,
    /// Called in this operation (or sent a hedge).
    tried: bool,
    /// It refused the request for good ([`Transient::moves_on`]): never sent it again.
    banned: bool,
    /// The earliest it may be called again, as its own errors asked (Retry-After).
    not_before: Option<Instant>,
}

mod racers;
mod standing;

use standing::{standing_at, Standing};

impl<Q, K: ?Sized, E> std::fmt::Debug for Route<'_, Q, K, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("execution", &self.execution)
            .field("targets", &self.targets.len())
            .field("current", &self.current)
            .finish()
    }
}

impl<'p, Q, K, E> Route<'p, Q, K, E>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// Starts the operation on `first`, with `others` after it in order (a value equal to
    /// one before it is not repeated).
    pub(crate) fn new(
        settings: &'p Settings,
        key: fn(&Q) -> &K,
        first: Q,
        others: impl IntoIterator<Item = Q>,
    ) -> Self {
        let targets = std::iter::once(first).chain(others).map(Target::new);
        let targets = distinct(key, targets.collect());
        let scope = (settings.keys.as_ref()).map(|keys| keys.held(key(&targets[0].value)));
        let execution = Execution::start(settings, breaker_of(settings, scope.as_ref()), scope);
        Route {
            settings,
            key,
            execution,
            targets,
            current: 0,
            started: false,
            waited: false,
        }
    }

    /// The execution the next attempt runs on, with its target's state.
    pub fn execution(&mut self) -> &mut Execution<'p, E> {
        &mut self.execution
    }

    /// The execution, once the attempts are over: for a stream's commit, or a fallback.
    pub fn into_execution(self) -> Execution<'p, E> {
        self.execution
    }

    /// The target of the next attempt, its state in place; or how the operation ends when
    /// every target would make no call (before any call, with the rejection of the first
    /// target looked at; after a failure, with what the provider said last).
    ///
    /// After a failure this is where the route waits: the backoff (and the Retry-After that
    /// target asked for) when it goes back to a target that failed, nothing when it moves to one
    /// not yet tried; and where the next attempt is drawn from the operation's allowance and
    /// the retry budget. Set the attempt's cost ([`Execution::set_cost`]) before asking: the
    /// token gates are judged with it.
    pub async fn target<T>(&mut self) -> Result<&Q, Outcome<T, E>>
    where
        E: Transient + From<Rejected>,
    {
        // The frame is published, as at an attempt's poll: the deadline the targets are
        // judged by includes the enclosing calls', the allowance is the operation's, and the
        // events carry the id.
        let frame = self.execution.progress.take_frame(&mut Limits::default());
        let chosen = crate::operation::published(&frame, || self.choose());
        self.execution.progress.frame = Some(frame);
        let (i, wait) = chosen?;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(&self.targets[i].value)
    }

    /// Chooses the next target and moves the operation to it, with the wait before its
    /// attempt; or ends the operation.
    fn choose<T>(&mut self) -> Result<(usize, Duration), Outcome<T, E>>
    where
        E: Transient + From<Rejected>,
    {
        let failed = self.started;
        let now = Instant::now();
        // The current target refused the last attempt before its call: that attempt was never
        // made, and the last error is an earlier target's, already counted.
        let tries = &mut self.execution.progress.tries;
        let refused = std::mem::take(&mut tries.routing.refused);
        if refused {
            tries.attempt = tries.attempt.saturating_sub(1);
        }
        let from = if failed {
            // The last error is the current target's (a race's last racer's is made current).
            if let Some(error) = self.execution.last_error.as_ref().filter(|_| !refused) {
                self.targets[self.current].lost(Lost::of(error), now);
            }
            self.current + 1
        } else {
            0
        };
        self.started = true;
        let count = self.targets.len();
        let order = (0..count)
            .map(|k| (from + k) % count)
            .filter(|&i| !self.targets[i].banned);
        // Not yet tried before tried, calling at once before waiting, then the order: the
        // targets are judged in order up to the first not yet tried that calls at once, which
        // nothing after it could beat.
        // What the first target in order would answer, for an end with every target refusing.
        let mut first_refusal = None;
        let mut chosen: Option<((bool, bool), usize)> = None;
        for (k, i) in order.enumerate() {
            let progress = &self.execution.progress;
            // A target whose own Retry-After is not over would wait for it.
            let standing =
                match standing_at(self.key, &self.targets, progress, self.current, i, now) {
                    Standing::Now if self.targets[i].asked(now).is_some() => Standing::Later,
                    standing => standing,
                };
            let tried = self.targets[i].tried;
            let rank = match standing {
                Standing::Skip(rejected) => {
                    // The target that just failed is moved on from, not passed over.
                    if !(failed && i == self.current) {
                        self.skipped(i, &rejected);
                    }
                    if k == 0 {
                        first_refusal = Some(rejected);
                    }
                    None
                }
                Standing::Later => Some((tried, true)),
                Standing::Now => Some((tried, false)),
            };
            if let Some(rank) = rank.filter(|rank| chosen.is_none_or(|(best, _)| rank < &best)) {
                chosen = Some((rank, i));
                if rank == (false, false) {
                    break;
                }
            }
        }
        let chosen = chosen.map(|(_, i)| i);
        let Some(i) = chosen else {
            return Err(self.turned_away(first_refusal));
        };
        let wait = if failed {
            self.draw(i, refused)?
        } else {
            Duration::ZERO
        };
        self.go_to(i);
        Ok((i, wait))
    }

    /// After a failure, the attempt on target `i`: the wait before it (none for a target not
    /// yet tried), drawn from the allowance and the budget (drawn already when the target
    /// chosen before `refused` the attempt); or the operation's end.
    fn draw<T>(&mut self, i: usize, refused: bool) -> Result<Duration, Outcome<T, E>>
    where
        E: Transient + From<Rejected>,
    {
        let progress = &mut self.execution.progress;
        let failed = progress.tries.attempt.saturating_sub(1);
        let asked = self.targets[i].asked(Instant::now());
        let wait = match (self.targets[i].tried, refused && self.waited) {
            (true, false) => progress.backoff(failed, asked),
            // The backoff after the failure was waited before the attempt the target chosen
            // then refused: only what this target's own errors still ask is left (a second
            // backoff would take the operation past its worst case). Once only: a target
            // refusing again after no wait waits the backoff, so that targets that pass the
            // route's look and refuse the attempt never make it choose again at one instant.
            (true, true) => progress.backoff_served(asked),
            (false, _) => Ok(Duration::ZERO),
        };
        self.waited = wait.as_ref().is_ok_and(|wait| !wait.is_zero());
        let drawn = |wait| match refused {
            true => Ok(wait),
            false => progress.draw_retry(failed, wait, asked).map(|()| wait),
        };
        match wait.and_then(drawn) {
            Ok(wait) => Ok(wait),
            Err(reason) => Err(self.give_up(reason)),
        }
    }

    /// Moves the operation to target `i` and tells who listens.
    fn go_to(&mut self, i: usize) {
        self.targets[i].tried = true;
        if i != self.current {
            let settings = self.settings;
            let key = (self.key)(&self.targets[i].value);
            let scope = settings.keys.as_ref().map(|keys| keys.held(key));
            let breaker = breaker_of(settings, scope.as_ref());
            self.execution.retarget(breaker, scope);
            self.current = i;
        }
        let other = (0..self.targets.len()).any(|j| j != i && !self.targets[j].banned);
        self.execution.progress.tries.routing = Routing {
            routed: true,
            other,
            refused: false,
        };
        sent(
            &self.execution.progress,
            (self.key)(&self.targets[i].value),
            false,
        );
    }

    /// Every target would make no call: before any call, the operation ends as if the first
    /// looked at had been called and had refused (`first_refusal`); after a failure, with
    /// that failure.
    fn turned_away<T>(&mut self, first_refusal: Option<Rejected>) -> Outcome<T, E>
    where
        E: Transient + From<Rejected>,
    {
        if self.execution.last_error.is_some() {
            return self.give_up(GiveUp::NoTarget);
        }
        let rejected = first_refusal.unwrap_or(Rejected::Incomplete);
        match self.execution.progress.reject(rejected) {
            Next::Done(outcome) => outcome,
            Next::Retry => unreachable!("a rejection ends the operation"),
        }
    }

    /// Ends the operation after a failure with what the provider said last: an error that
    /// moves on, with no target left for it, is permanent.
    fn give_up<T>(&mut self, reason: GiveUp) -> Outcome<T, E>
    where
        E: Transient + From<Rejected>,
    {
        let progress = &mut self.execution.progress;
        // The attempt counted for the next target was never made.
        progress.tries.attempt = progress.tries.attempt.saturating_sub(1);
        let Some(error) = self.execution.last_error.take() else {
            return Outcome::Failed(E::from(Rejected::Incomplete));
        };
        if !error.is_transient() {
            progress.outcome("error");
            return Outcome::Completed(Err(error));
        }
        let asked = error.retry_after();
        match progress.give_up(error, reason, "error", asked) {
            Next::Done(outcome) => outcome,
            Next::Retry => unreachable!("giving up ends the operation"),
        }
    }

    fn skipped(&self, i: usize, rejected: &Rejected) {
        let progress = &self.execution.progress;
        if !(progress.report.listening || cfg!(feature = "metrics")) {
            return;
        }
        let name = self.name(i);
        #[cfg(feature = "metrics")]
        progress.settings.meters.routed(name.as_str(), false);
        progress.notify(|listener, site, operation| {
            listener.on_event(&Event::Skipped {
                site,
                operation,
                target: name.as_str(),
                rejected,
            });
        });
    }

    fn name(&self, i: usize) -> Name<'_> {
        Name::of((self.key)(&self.targets[i].value))
    }
}

/// Up to this many targets, a repeat is found by comparing each value with those before it
/// (at most 28 comparisons); past it, by its key's hash first, so that a long route costs a
/// pass over its targets, not their square.
const COMPARED: usize = 8;

/// `targets` in order, each value once: its first place kept.
fn distinct<Q: PartialEq, K: Key + ?Sized>(
    key: fn(&Q) -> &K,
    mut targets: Vec<Target<Q>>,
) -> Vec<Target<Q>> {
    use std::collections::hash_map::{Entry, HashMap};
    // For a long route only: the first kept target of each key's hash.
    let mut hashed = (targets.len() > COMPARED).then(|| {
        let state = foldhash::fast::RandomState::default();
        (HashMap::with_hasher(state.clone()), state)
    });
    let mut kept = 0;
    for i in 0..targets.len() {
        let (before, rest) = targets.split_at(kept);
        let value = &rest[i - kept].value;
        let repeat = match &mut hashed {
            Some((firsts, state)) => match firsts.entry(crate::key::hash_key(key(value), state)) {
                Entry::Vacant(vacant) => {
                    vacant.insert(kept);
                    false
                }
                // The first with this hash, or, for two values that collide, any before.
                Entry::Occupied(first) => {
                    before[*first.get()].value == *value
                        || before.iter().any(|target| target.value == *value)
                }
            },
            None => before.iter().any(|target| target.value == *value),
        };
        if !repeat {
            targets.swap(kept, i);
            kept += 1;
        }
    }
    targets.truncate(kept);
    targets
}

impl<Q> Target<Q> {
    fn new(value: Q) -> Self {
        Target {
            value,
            tried: false,
            banned: false,
            not_before: None,
        }
    }

    /// An attempt on it failed at `now` with an error that says `lost`.
    fn lost(&mut self, lost: Lost, now: Instant) {
        self.banned |= lost.moves_on;
        if let Some(wait) = lost.retry_after {
            let at = later(now, wait);
            self.not_before = Some(self.not_before.map_or(at, |before| before.max(at)));
        }
    }

    /// What is left at `now` of the wait it asked for, if anything.
    fn asked(&self, now: Instant) -> Option<Duration> {
        let left = self.not_before?.saturating_duration_since(now);
        (!left.is_zero()).then_some(left)
    }
}

/// The next attempt (a hedge, if `hedge`) goes to `target`: the metrics and listeners hear.
fn sent<K: Key + ?Sized>(progress: &Progress<'_>, target: &K, hedge: bool) {
    let listening = progress.report.listening;
    if !(listening || cfg!(feature = "metrics")) {
        return;
    }
    let name = Name::of(target);
    #[cfg(feature = "metrics")]
    progress.settings.meters.routed(name.as_str(), true);
    let attempt = progress.tries.attempt;
    progress.notify(|listener, site, operation| {
        listener.on_event(&Event::Routed {
            site,
            operation,
            attempt,
            target: name.as_str(),
            hedge,
        });
    });
}

/// The breaker a call on `scope` goes through: its key's, or the one all calls share.
pub(super) fn breaker_of<'p>(
    settings: &'p Settings,
    scope: Option<&Held<Scope>>,
) -> Option<BreakerRef<'p>> {
    match scope.and_then(|scope| scope.breaker.as_ref()) {
        Some(breaker) => Some(BreakerRef::Keyed(std::sync::Arc::clone(breaker))),
        None => settings.breaker.as_deref().map(BreakerRef::Shared),
    }
}
