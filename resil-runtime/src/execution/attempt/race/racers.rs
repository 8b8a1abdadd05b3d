//! [`Racers`]: what makes a race's racers, for a plain race and a route's.

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

    /// The racer made with `tag` won.
    #[doc(hidden)]
    fn won(&mut self, _tag: usize) {}
}

mod sealed {
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
pub struct Plain<M>(pub(super) M);

impl<M> sealed::Sealed for Plain<M> {}

impl<'p, F, M: FnMut() -> F> Racers<'p> for Plain<M> {
    type Attempt = F;

    fn make(&mut self, _: &mut Hedging<'_, 'p>) -> F {
        (self.0)()
    }
}

impl<Q, K: ?Sized, M> sealed::Sealed for crate::execution::route::Routed<'_, '_, Q, K, M> {}
