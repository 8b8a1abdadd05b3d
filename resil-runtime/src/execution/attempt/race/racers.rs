//! [`Racers`]: what makes a race's racers, for a plain race and a route's.

use std::time::Duration;

use tokio::time::Instant;

use crate::deadline::later;
use crate::execution::admission::Admission;
use crate::execution::Progress;

/// What makes a race's racers: each one's future, and, for a hedge that goes elsewhere (a
/// route's next target), its admission. Implemented by resil only.
pub trait Racers<'p>: sealed::Sealed {
    /// A racer's future.
    type Attempt;

    /// The next racer: the first one, or a hedge (`hedging` says which, and takes the
    /// admission of a hedge sent elsewhere).
    #[doc(hidden)]
    fn make(&mut self, hedging: &mut Hedging<'_, 'p>) -> Self::Attempt;

    /// The racer made with `tag` ended the race (it won, or failed last): its target is the
    /// operation's.
    #[doc(hidden)]
    fn ended(&mut self, _tag: usize) {}

    /// The racer made with `tag` failed while others race on, with an error that says this
    /// of its target.
    #[doc(hidden)]
    fn lost(&mut self, _tag: usize, _lost: Lost) {}

    /// Whether the target of the racer made with `tag` takes no call at `now`: it moved the
    /// operation on, or the wait it asked for is not over.
    #[doc(hidden)]
    fn refuses(&self, tag: usize, now: Instant) -> bool;

    /// When the next hedge may be sent, looked at `now`: `None` at once, or no sooner than
    /// the instant returned (no target would take it before).
    #[doc(hidden)]
    fn hedge_at(&mut self, hedging: &Hedging<'_, 'p>, now: Instant) -> Option<Instant>;

    /// What is left now of the wait the racers' target asked for, when the racer made with
    /// `tag` failed last: what the next attempt waits at least. A route keeps each target's
    /// own and waits there instead.
    #[doc(hidden)]
    fn asked(&self, _tag: usize) -> Option<Duration> {
        None
    }
}

/// What an attempt's error says of its target.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Lost {
    /// It refused the request for good ([`crate::Transient::moves_on`]): never send it again.
    pub(crate) moves_on: bool,
    /// It asked to be called again no sooner than this (Retry-After).
    pub(crate) retry_after: Option<std::time::Duration>,
}

impl Lost {
    pub(crate) fn of<E: crate::Transient>(error: &E) -> Self {
        Lost {
            moves_on: !error.is_transient() && error.moves_on(),
            retry_after: error.retry_after(),
        }
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// What a maker of racers is told of the race, and tells back.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct Hedging<'x, 'p> {
    pub(crate) progress: &'x Progress<'p>,
    /// Whether the racer is a hedge (not the race's first).
    pub(crate) hedge: bool,
    /// A hedge sent elsewhere: its own admission there.
    pub(crate) admission: Option<Admission<'p>>,
    /// What the maker calls the racer, told back when it wins.
    pub(crate) tag: usize,
}

/// The racers of [`Execution::race`]: every one from `make`, on the operation's target.
#[doc(hidden)]
#[allow(missing_debug_implementations)]
pub struct Plain<M> {
    make: M,
    /// The earliest the target may be called again, as a racer's error asked (Retry-After).
    not_before: Option<Instant>,
}

impl<M> Plain<M> {
    pub(super) fn new(make: M) -> Self {
        Plain {
            make,
            not_before: None,
        }
    }

    fn held(&self, now: Instant) -> Option<Instant> {
        self.not_before.filter(|&at| at > now)
    }
}

impl<M> sealed::Sealed for Plain<M> {}

impl<'p, F, M: FnMut() -> F> Racers<'p> for Plain<M> {
    type Attempt = F;

    fn make(&mut self, _: &mut Hedging<'_, 'p>) -> F {
        (self.make)()
    }

    // An error that moves on ends a plain race: only a wait asked for holds its target.
    fn lost(&mut self, _: usize, lost: Lost) {
        if let Some(wait) = lost.retry_after {
            let at = later(Instant::now(), wait);
            self.not_before = Some(self.not_before.map_or(at, |before| before.max(at)));
        }
    }

    fn refuses(&self, _: usize, now: Instant) -> bool {
        self.held(now).is_some()
    }

    fn hedge_at(&mut self, _: &Hedging<'_, 'p>, now: Instant) -> Option<Instant> {
        self.held(now)
    }

    // The clock is read only when a wait was asked for: a race won at once never reads it.
    fn asked(&self, _: usize) -> Option<Duration> {
        self.not_before?;
        let now = Instant::now();
        self.held(now).map(|at| at - now)
    }
}
