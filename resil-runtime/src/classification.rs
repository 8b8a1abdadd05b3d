//! [`Classification`]: what a function says of an error type that does not implement
//! [`Transient`] itself (a type of another crate, which the orphan rule keeps from deriving
//! or implementing it): `#[resilient(transient = path)]`.

use std::time::Duration;

use crate::{Rejected, Transient};

/// What an error is worth, as a classifier (`#[resilient(transient = classify)]`,
/// `fn classify(error: &E) -> Classification`) says it. A classifier that only says
/// transient or not may return `bool` instead (`true` is [`Classification::Transient`]).
///
/// ```
/// use resil_runtime::{Classification, Transient};
/// use std::time::Duration;
///
/// let throttle = Classification::Throttle { wait: Some(Duration::from_secs(2)) };
/// assert!(throttle.is_transient() && throttle.is_throttle());
/// assert_eq!(throttle.retry_after(), Some(Duration::from_secs(2)));
/// assert!(!Classification::Permanent.is_transient());
/// assert_eq!(Classification::from(true), Classification::Transient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classification {
    /// Not worth retrying: returned to the caller at once, counted by no breaker.
    Permanent,
    /// Worth retrying after the backoff; counts toward opening a breaker.
    Transient,
    /// Worth retrying, not before this wait (the other side's `Retry-After`): the backoff
    /// never waits less. Counts toward opening a breaker.
    Wait(Duration),
    /// The other side says "too fast" (a 429): retried after `wait` (or the backoff),
    /// never counted toward opening a breaker, and a rate gate holds its other callers.
    Throttle {
        /// How long the other side asked us to wait, if it said.
        wait: Option<Duration>,
    },
    /// Permanent for this target only (a context too long for this model): a route
    /// (`route = model in [...]`) moves on to its next target at once; without a route it
    /// is permanent.
    MoveOn,
}

impl Classification {
    /// What `error` says of itself through its [`Transient`] impl.
    pub fn of(error: &(impl Transient + ?Sized)) -> Self {
        if error.moves_on() {
            Classification::MoveOn
        } else if !error.is_transient() {
            Classification::Permanent
        } else if error.is_throttle() {
            Classification::Throttle {
                wait: error.retry_after(),
            }
        } else {
            error
                .retry_after()
                .map_or(Classification::Transient, Classification::Wait)
        }
    }
}

impl From<bool> for Classification {
    /// `true`: [`Classification::Transient`]; `false`: [`Classification::Permanent`].
    fn from(transient: bool) -> Self {
        if transient {
            Classification::Transient
        } else {
            Classification::Permanent
        }
    }
}

impl Transient for Classification {
    fn is_transient(&self) -> bool {
        matches!(
            self,
            Classification::Transient | Classification::Wait(_) | Classification::Throttle { .. }
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match *self {
            Classification::Wait(wait) => Some(wait),
            Classification::Throttle { wait } => wait,
            _ => None,
        }
    }

    fn is_throttle(&self) -> bool {
        matches!(self, Classification::Throttle { .. })
    }

    fn moves_on(&self) -> bool {
        matches!(self, Classification::MoveOn)
    }
}

/// An error under a classifier, as the runtime sees it: the body's error with what the
/// classifier said of it, or a failure the runtime made itself, which keeps its own
/// classification (a timeout stays transient) whatever the classifier would say of it once
/// converted. The runtime's failures reach it through `From<Rejected>`, so that is how it
/// knows them; they become `E` only when the operation ends ([`Judged::into_error`]).
/// What `transient = path` and [`PolicyBuilder::transient`](crate::PolicyBuilder::transient)
/// run on.
#[doc(hidden)]
#[derive(Debug)]
pub enum Judged<E> {
    /// What the body returned, and what the classifier said of it.
    Body(E, Classification),
    /// What the runtime made.
    Runtime(Rejected),
}

impl<E> Judged<E> {
    /// `error`, with what `classify` says of it.
    #[inline]
    pub fn body<R: Into<Classification>>(error: E, classify: fn(&E) -> R) -> Self {
        let class = classify(&error).into();
        Judged::Body(error, class)
    }

    /// The error in the function's own type: the body's as it was, the runtime's made an `E`
    /// by `carry` (`From<Rejected>`, or the function given as `rejected`).
    pub fn into_error(self, carry: impl FnOnce(Rejected) -> E) -> E {
        match self {
            Judged::Body(error, _) => error,
            Judged::Runtime(rejected) => carry(rejected),
        }
    }
}

/// What judges a policy's errors in place of their type's [`Transient`]: the function given to
/// [`PolicyBuilder::transient`](crate::PolicyBuilder::transient) (its error type then carries
/// resil's own failures through `From<Rejected>`), or a [`Classifier`], which also says how
/// they become an error of that type. Sealed: the builder makes both.
///
/// ```
/// use resil_runtime::{Judge, Rejected};
///
/// #[derive(Debug)]
/// struct Status(u16);
/// impl From<Rejected> for Status {
///     fn from(_: Rejected) -> Self { Status(599) }
/// }
/// fn is_retryable(status: &Status) -> bool { status.0 == 503 }
///
/// let judge: fn(&Status) -> bool = is_retryable;
/// assert!(resil_runtime::Transient::is_transient(&judge.judge(&Status(503))));
/// assert_eq!(judge.carry(Rejected::DeadlineExceeded).0, 599);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` judges an error type that cannot carry resil's own failures (timeouts, an open breaker): it does not implement `From<resil::Rejected>`",
    note = "implement `From<resil::Rejected>` for the error type, or, for a type of another crate, give the builder a function that makes one: `.transient(classify).rejected(to_status)` with `fn to_status(rejected: resil::Rejected) -> Status`"
)]
pub trait Judge: Copy + sealed::Sealed {
    /// The error type judged.
    type Error;
    /// What `error` is worth.
    fn judge(self, error: &Self::Error) -> Classification;
    /// resil's own failure (a timeout, an open breaker) as an error of that type.
    fn carry(self, rejected: Rejected) -> Self::Error;
}

mod sealed {
    pub trait Sealed {}
    impl<E, R> Sealed for fn(&E) -> R {}
    impl<E, R> Sealed for super::Classifier<E, R> {}
}

impl<E: From<Rejected>, R: Into<Classification>> Judge for fn(&E) -> R {
    type Error = E;

    #[inline]
    fn judge(self, error: &E) -> Classification {
        self(error).into()
    }

    fn carry(self, rejected: Rejected) -> E {
        E::from(rejected)
    }
}

/// A classifier with its own conversion of resil's failures, for an error type of another
/// crate: neither `Transient` nor `From<Rejected>` can be implemented for it (the orphan rule),
/// so a function makes one from a [`Rejected`] (`#[resilient(transient = classify, rejected =
/// to_status)]` on the attribute, [`PolicyBuilder::rejected`](crate::PolicyBuilder::rejected)
/// on the builder).
///
/// ```
/// use resil_runtime::{Classifier, Policy, Rejected};
/// use std::sync::LazyLock;
///
/// #[derive(Debug)]
/// pub enum Status { Unavailable, Internal(String) }
/// fn is_retryable(status: &Status) -> bool { matches!(status, Status::Unavailable) }
/// fn to_status(rejected: Rejected) -> Status { Status::Internal(rejected.to_string()) }
///
/// static POLICY: LazyLock<Policy<resil_runtime::Unkeyed, Classifier<Status, bool>>> =
///     LazyLock::new(|| {
///         let builder = Policy::builder().retry(2).transient(is_retryable);
///         builder.rejected(to_status).build().unwrap()
///     });
/// # let _ = &*POLICY;
/// ```
pub struct Classifier<E, R> {
    pub(crate) classify: fn(&E) -> R,
    pub(crate) rejected: fn(Rejected) -> E,
}

impl<E, R> Clone for Classifier<E, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E, R> Copy for Classifier<E, R> {}

impl<E, R> std::fmt::Debug for Classifier<E, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier").finish_non_exhaustive()
    }
}

impl<E, R: Into<Classification>> Judge for Classifier<E, R> {
    type Error = E;

    #[inline]
    fn judge(self, error: &E) -> Classification {
        (self.classify)(error).into()
    }

    fn carry(self, rejected: Rejected) -> E {
        (self.rejected)(rejected)
    }
}

impl<E> From<Rejected> for Judged<E> {
    fn from(rejected: Rejected) -> Self {
        Judged::Runtime(rejected)
    }
}

impl<E> Transient for Judged<E> {
    fn is_transient(&self) -> bool {
        match self {
            Judged::Body(_, class) => class.is_transient(),
            Judged::Runtime(rejected) => rejected.is_transient(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Judged::Body(_, class) => class.retry_after(),
            Judged::Runtime(rejected) => rejected.retry_after(),
        }
    }

    fn is_throttle(&self) -> bool {
        match self {
            Judged::Body(_, class) => class.is_throttle(),
            Judged::Runtime(rejected) => rejected.is_throttle(),
        }
    }

    fn moves_on(&self) -> bool {
        match self {
            Judged::Body(_, class) => class.moves_on(),
            Judged::Runtime(rejected) => rejected.moves_on(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_classification_reads_back_as_itself() {
        for class in [
            Classification::Permanent,
            Classification::Transient,
            Classification::Wait(Duration::from_secs(3)),
            Classification::Throttle { wait: None },
            Classification::Throttle {
                wait: Some(Duration::from_secs(1)),
            },
            Classification::MoveOn,
        ] {
            assert_eq!(Classification::of(&class), class);
        }
    }

    #[test]
    fn the_runtimes_failures_keep_their_own_classification() {
        let timeout = Rejected::Timeout {
            after: Duration::from_secs(1),
        };
        assert_eq!(Classification::of(&timeout), Classification::Transient);
    }
}
