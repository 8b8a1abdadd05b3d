//! What an attempt's result counts for: the breaker's verdict and the listeners' outcome.

use super::Failure;
use crate::breaker::Verdict;
use crate::events::AttemptOutcome;
use crate::{Rejected, Transient};

/// How the attempt counts for the breaker: an attempt timeout is a failure of the
/// provider; a throttle (a healthy provider saying "too fast"), a cut by the deadline, a
/// rejection and a permanent error count for nothing.
pub(super) fn verdict<T, E: Transient>(result: &Result<T, Failure<E>>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(Failure::Error(error)) if error.is_transient() && !error.is_throttle() => {
            Verdict::Failure
        }
        Err(Failure::Rejected(Rejected::Timeout { .. })) => Verdict::Failure,
        Err(_) => Verdict::Neutral,
    }
}

/// What the listeners hear the attempt ended with.
pub(super) fn outcome<'r, T, E: Transient>(
    result: &'r Result<T, Failure<E>>,
) -> AttemptOutcome<'r> {
    match result {
        Ok(_) => AttemptOutcome::Ok,
        Err(Failure::Error(error)) if error.is_throttle() => AttemptOutcome::Throttled,
        Err(Failure::Error(error)) if error.is_transient() => AttemptOutcome::Transient,
        Err(Failure::Error(_)) => AttemptOutcome::Permanent,
        Err(Failure::Rejected(rejected)) => AttemptOutcome::Rejected(rejected),
    }
}
