//! A route's racers: the first on the target the route chose, each hedge on the next target
//! that would call, in the route's order of preference, with its own breaker, gates and (per
//! key) bulkhead place there; on the same target when no other would call.

use std::future::Future;

use futures_core::Stream;

use super::{breaker_of, sent, standings, Route, Standing, Target};
use crate::execution::admission::Admission;
use crate::execution::attempt::{Hedging, Racers};
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
    /// The route's current target: the first racer's, then the winner's.
    current: &'r mut usize,
    /// The targets racing now.
    racing: Vec<usize>,
    make: M,
}

impl<'p, Q, K, M, F> Racers<'p> for Routed<'_, 'p, Q, K, M>
where
    Q: PartialEq,
    K: Key + ?Sized,
    M: FnMut(&Q) -> F,
{
    type Attempt = F;

    fn make(&mut self, hedging: &mut Hedging<'_, 'p>) -> F {
        let current = *self.current;
        let chosen = if hedging.hedge {
            self.next(hedging)
        } else {
            None
        };
        let i = chosen.unwrap_or(current);
        self.racing.push(i);
        hedging.tag = i;
        (self.make)(&self.targets[i].value)
    }

    fn won(&mut self, tag: usize) {
        *self.current = tag;
    }
}

impl<'p, Q, K, M> Routed<'_, 'p, Q, K, M>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// A hedge's target other than those racing, with its admission there; `None`: no other
    /// target would call now.
    fn next(&mut self, hedging: &mut Hedging<'_, 'p>) -> Option<usize> {
        let progress = hedging.progress;
        let count = self.targets.len();
        let standings = standings(self.key, self.targets, progress, *self.current);
        let i = (1..count)
            .map(|k| (*self.current + k) % count)
            .filter(|i| !self.targets[*i].banned && !self.racing.contains(i))
            .filter_map(|i| match standings[i] {
                Standing::Skip(_) => None,
                Standing::Later => Some(((self.targets[i].tried, true), i)),
                Standing::Now => Some(((self.targets[i].tried, false), i)),
            })
            .min_by_key(|(rank, _)| *rank)
            .map(|(_, i)| i)?;
        let settings = self.settings;
        let scope =
            (settings.keys.as_ref()).map(|keys| keys.held((self.key)(&self.targets[i].value)));
        let mut admission =
            Admission::elsewhere(settings, breaker_of(settings, scope.as_ref()), scope);
        admission.cost = progress.admission.as_ref().map_or(1, |own| own.cost);
        hedging.admission = Some(admission);
        self.targets[i].tried = true;
        sent(progress, (self.key)(&self.targets[i].value), true);
        Some(i)
    }
}

impl<'p, Q, K, E> Route<'p, Q, K, E>
where
    Q: PartialEq,
    K: Key + ?Sized,
{
    /// Hedged attempts on the route ([`crate::Execution::race`]): the first racer on the
    /// target [`Route::target`] chose, each hedge on the next target that would call (on the
    /// same one when none would). `make` gets each racer's target. A hedge that wins makes
    /// its target the operation's.
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
