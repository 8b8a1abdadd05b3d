//! What the timed benchmarks and the instruction counter share: the error type, and a
//! poll with a no-op waker.

use std::future::Future;
use std::task::{Context, Poll};

use resil::{Rejected, Transient};

/// The operations' error: transient, and a rejection converts into it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
pub enum Failure {
    #[error("busy")]
    #[transient]
    Busy,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// Polls a future once with a no-op waker: for the rejected-call benchmarks, which finish
/// on the first poll, and the instruction counter's ready calls.
#[inline]
pub fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    std::pin::pin!(future).poll(&mut cx)
}
