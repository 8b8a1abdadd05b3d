//! The [`Transient`] trait: an error type says for itself whether it is worth retrying.

use std::time::Duration;

/// Says whether an error is worth retrying, and how long the other side asked us to wait.
///
/// resil retries an attempt only when its error `is_transient()`, and a transient error is
/// the only kind that counts toward opening a circuit breaker. Permanent errors (a bad
/// request, a missing permission) go straight back to the caller. A throttle (a 429: the
/// provider is healthy, this client is too fast) is retried after its wait but never counts
/// toward opening a breaker, and a rate gate holds its other callers for that wait.
///
/// Derive it with `#[derive(Transient)]` from the `resil` crate, or implement it by hand. An
/// error of code you do not own can be returned as `Box<dyn Error + Send + Sync>` (or, with
/// the `anyhow` feature, `anyhow::Error`): the first error of its chain that resil can classify
/// decides.
///
/// ```
/// use resil_runtime::Transient;
/// use std::time::Duration;
///
/// #[derive(Debug)]
/// enum PaymentError {
///     Declined,
///     GatewayBusy { retry_after: Option<Duration> },
/// }
///
/// impl Transient for PaymentError {
///     fn is_transient(&self) -> bool {
///         matches!(self, PaymentError::GatewayBusy { .. })
///     }
///     fn retry_after(&self) -> Option<Duration> {
///         match self {
///             PaymentError::GatewayBusy { retry_after } => *retry_after,
///             PaymentError::Declined => None,
///         }
///     }
/// }
///
/// assert!(!PaymentError::Declined.is_transient());
/// assert!(PaymentError::GatewayBusy { retry_after: None }.is_transient());
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say whether it is worth retrying: it does not implement `Transient`",
    label = "this error type must implement `resil::Transient`",
    note = "for an error type of your crate, add `#[derive(resil::Transient)]` to it and mark the retryable variants with `#[transient]`, or implement `resil::Transient` by hand",
    note = "for `anyhow::Error`, turn on resil's `anyhow` feature (`resil = {{ version = \"0.1\", features = [\"anyhow\"] }}`): resil then classifies it by its chain, as it does `Box<dyn std::error::Error + Send + Sync>`",
    note = "for an error type of another crate, name a function that decides with `transient = path`, or return one of those two",
    note = "the guide's page `resil::guide::adopting` shows each way"
)]
pub trait Transient {
    /// Would the same call, made again later, plausibly succeed?
    fn is_transient(&self) -> bool;

    /// How long the other side asked us to wait (`Retry-After`), if it said.
    ///
    /// The backoff never waits less than this before the next attempt.
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// Is this the provider saying "too fast" (429) rather than failing? A throttle should
    /// also be transient. It does not count toward opening a circuit breaker: against a rate
    /// limit, a breaker that counted 429s would shut out a healthy provider.
    fn is_throttle(&self) -> bool {
        false
    }

    /// Is this a permanent error of this target only, worth sending to another one (a
    /// context too long for this model, a content filter, a model not found)? A route
    /// (`route = model in [...]`) moves on from it at once and never sends the request to
    /// that target again; without a route it is permanent like any other. It does not count
    /// toward opening a breaker.
    fn moves_on(&self) -> bool {
        false
    }
}

impl<T: Transient + ?Sized> Transient for &T {
    fn is_transient(&self) -> bool {
        (**self).is_transient()
    }
    fn retry_after(&self) -> Option<Duration> {
        (**self).retry_after()
    }
    fn is_throttle(&self) -> bool {
        (**self).is_throttle()
    }
    fn moves_on(&self) -> bool {
        (**self).moves_on()
    }
}

impl<T: Transient + ?Sized> Transient for Box<T> {
    fn is_transient(&self) -> bool {
        (**self).is_transient()
    }
    fn retry_after(&self) -> Option<Duration> {
        (**self).retry_after()
    }
    fn is_throttle(&self) -> bool {
        (**self).is_throttle()
    }
    fn moves_on(&self) -> bool {
        (**self).moves_on()
    }
}

/// A tokio timeout that fired: the next try may well be faster.
impl Transient for tokio::time::error::Elapsed {
    fn is_transient(&self) -> bool {
        true
    }
}
