//! A route's racers: the first on the target the route chose, each hedge on the next target
//! that would call, in the route's order of preference, with its own breaker, gates and (per
//! key) bulkhead place there; on the same target when no other would call.

use std::future::Future;
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;

use super::{breaker_of, sent, standing_at, Route, Standing, Target};
use crate::deadline::later;
use crate::execution::admission::Admission;
use crate::execution::attempt::{Hedging, Lost, Racers, SealedRacers};
use crate::execution::Next;
use crate::key::Key;
use crate::policy::Settings;
use crate::stream::{committing_item, Commit, Committed};
use crate::{Rejected, Transient};

/// The racers of [`Route::race`].
pub(crate) struct Routed<'r, 'p, Q, K: ?Sized, M> {
    settings: &'p Settings,
    key: fn(&Q) -> &K,
    targets: &'r mut Vec<Target<Q>>,
    /// The route's current target: the first racer's, then that of the racer that ended the
    /// race (the winner, or the last to fail).
    current: &'r mut usize,
    /// The targets racing now.
    racing: Vec<usize>,
    /// The next hedge's target, as [`Racers::hedge_at`] found it: another target, or `None`
    /// for the current one.
    next: Option<usize>,
    make: M,
}

impl<Q, K: ?Sized, M> SealedRacers for Routed<'_, '_, Q, K, M> {}

impl<'p, Q, K, M, F> Racers<'p> for Routed<'_, 'p, Q, K, M>
where
    Q: PartialEq,
    K: Key + ?Sized,
    M: FnMut(&Q) -> F,
{
    type Attempt = F;

    fn make(&mut self, hedging: &mut Hedging<'_, 'p>) -> F {
        let current = *self.current;
        let chosen = match hedging.hedge {
            true => self.next.take(),
            false => None,
        };
        if let Some(i) = chosen {
            self.admit_elsewhere(i, hedging);
        }
        let i = chosen.unwrap_or(current);
        if hedging.hedge {
            // Every hedge's target is marked, on the same target too.
            sent(hedging.progress, (self.key)(&self.targets[i].value), true);
        }
        self.racing.push(i);
        hedging.tag = i;
        (self.make)(&self.targets[i].value)
    }

    fn ended(&mut self, tag: usize) {
        *self.current = tag;
    }

    fn lost(&mut self, tag: usize, lost: Lost) {
        self.targets[tag].lost(lost, Instant::now());
    }

    fn refuses(&self, tag: usize, now: Instant) -> bool {
        let target = &self.targets[tag];
        target.banned || target.asked(now).is_some()
    }

    /// A hedge goes to the next target that would call, else to the current one unless it
    /// refuses: then none is sent before the current one's wait ends, or before another
    /// delay (a target skipped now may call then).
    fn hedge_at(&mut self, hedging: &Hedging<'_, 'p>, now: Instant) -> Option<Instant> {
        self.next = self.pick(hedging, now);
        let current = &self.targets[*self.current];
        if self.next.is_some() || !self.refuses(*self.current, now) {
            return None;
        }
        let delay = (hedging.progress.settings.hedge).map_or(Duration::MAX, |hedge| hedge.delay);
        match current.not_before.filter(|_| !current.banned) {
            Some(at) => Some(at),
            None => Some(later(now, delay)),
        }
    }
}

impl<'p, Q, K, M> Routed<'_, 'p, Q, K, M>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// A hedge's target other than those racing; `None`: no other target would call now.
    fn pick(&self, hedging: &Hedging<'_, 'p>, now: Instant) -> Option<usize> {
        let progress = hedging.progress;
        let (count, current) = (self.targets.len(), *self.current);
        // Ranked as the route ranks, and judged in order only up to the first not yet tried
        // that calls at once. A hedge starts now: not on a target that asked to wait longer.
        let mut chosen: Option<((bool, bool), usize)> = None;
        for i in (1..count).map(|k| (current + k) % count) {
            let target = &self.targets[i];
            if target.banned || self.racing.contains(&i) || target.asked(now).is_some() {
                continue;
            }
            let rank = match standing_at(self.key, self.targets, progress, current, i, now) {
                Standing::Skip(_) => continue,
                Standing::Later => (target.tried, true),
                Standing::Now => (target.tried, false),
            };
            if chosen.is_none_or(|(best, _)| rank < best) {
                chosen = Some((rank, i));
                if rank == (false, false) {
                    break;
                }
            }
        }
        chosen.map(|(_, i)| i)
    }

    /// The hedge goes to target `i`: its admission there.
    fn admit_elsewhere(&mut self, i: usize, hedging: &mut Hedging<'_, 'p>) {
        let progress = hedging.progress;
        let settings = self.settings;
        let scope =
            (settings.keys.as_ref()).map(|keys| keys.held((self.key)(&self.targets[i].value)));
        let mut admission =
            Admission::elsewhere(settings, breaker_of(settings, scope.as_ref()), scope);
        // What the operation's attempts cost, and its class and fair value.
        if let Some(own) = progress.admission.as_ref() {
            (admission.cost, admission.place) = (own.cost, own.place);
        }
        hedging.admission = Some(admission);
        self.targets[i].tried = true;
    }
}

impl<'p, Q, K, E> Route<'p, Q, K, E>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// Hedged attempts on the route ([`crate::Execution::race`]): the first racer on the
    /// target [`Route::target`] chose, each hedge on the next target that would call (on the
    /// same one when none would). `make` gets each racer's target. The racer that ends
    /// the race (the winner, or the last to fail) makes its target the operation's.
    pub fn race<T, F, M>(
        &mut self,
        make: M,
    ) -> impl Future<Output = Next<T, E>> + use<'_, 'p, T, F, M, Q, K, E>
    where
        M: FnMut(&Q) -> F,
        F: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        let routed = Routed {
            settings: self.settings,
            key: self.key,
            targets: &mut self.targets,
            current: &mut self.current,
            racing: Vec::new(),
            next: None,
            make,
        };
        self.execution.race_with(routed)
    }
}

impl<'p, Q, K, E> Route<'p, Q, K, E>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// [`Route::race`] for a streaming call: each racer connects to its target with what
    /// `connect` returns; the first to commit wins.
    pub fn race_stream_until<T, S, Fut, M>(
        &mut self,
        mut connect: M,
        commit: Commit<T>,
    ) -> impl Future<Output = Next<Committed<T, S>, E>> + use<'_, 'p, T, S, Fut, M, Q, K, E>
    where
        M: FnMut(&Q) -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        let hold = self.execution.progress.settings.commit_hold;
        self.race(move |target| committing_item(connect(target), commit, hold))
    }
}
