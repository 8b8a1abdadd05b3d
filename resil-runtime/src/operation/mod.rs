//! One logical operation: an id stable across attempts, one deadline, one retry allowance,
//! seen by every `#[resilient]` call nested inside it.
//!
//! Retries multiply across layers: three layers that each try four times send 64 calls to a
//! dependency that is already failing; an inner 20 s timeout inside an outer 10 s deadline
//! keeps working after the caller has left. So the outermost call opens an *operation* (a
//! context that travels with the task running it) and nested calls respect it:
//!
//! - **Deadline.** A nested call runs under the smaller of its own limits and what is left of
//!   every enclosing deadline, and [`Operation::remaining`] inside it reports that smaller
//!   figure, so a deadline passed downstream is never overstated. Once it has passed, nested
//!   calls fail with [`Rejected::DeadlineExceeded`](crate::Rejected::DeadlineExceeded) without
//!   calling.
//! - **Retries.** A call draws its retries from the allowance of the nearest enclosing call
//!   that declares retries (the retry owner); a call with no such ancestor owns its own. Three
//!   nested layers of `retry = 3` over a dead dependency make 4 calls, not 64; two sibling
//!   calls under a parent with `retry = 0` each keep their own allowance.
//! - **Ids.** [`Operation::id`] names the current call and is stable across its attempts: the
//!   outermost call has the operation id; the n-th nested call started by an attempt of its
//!   parent has `{parent id}.{n}` (n from 1, counted afresh in each parent attempt). Two
//!   different charges inside one operation get different idempotency keys, and a retried
//!   parent re-derives the same key for the same charge.
//! - **One breaker, one verdict.** A nested call on a breaker that an enclosing call holds
//!   (admitted, or probing) goes through as part of that call: it never waits for a probe
//!   verdict that depends on itself, and the breaker records the outcome once.
//! - **Opting out.** `nested = "independent"` ([`PolicyBuilder::independent`]) keeps a call's
//!   own retry count inside an operation. That is right when the inner call is a separate
//!   contract with its own budget (a different team's service, a queue hand-off whose
//!   retries the caller never sees), and wrong for plain layering, where it multiplies.
//!
//! Each call keeps its frame (id, deadline, allowance, the breaker it holds) in its own
//! state; while one of its attempts is polled the frame is published to the thread (see
//! `frame.rs`), so nested calls see their ancestors and a task started with `tokio::spawn`
//! does not. Carry the operation into one explicitly with [`Operation::scope`].
//!
//! A call belongs to the operation it is first polled in (or to none, opening its own). Polled
//! later inside the body of a call of another operation (a shared future that coalesces
//! requests, a call moved between tasks, a carried operation), it still reads and spends only
//! its own operation's: its retries, its attempt count, the breakers held around it.
//!
//! [`PolicyBuilder::independent`]: crate::PolicyBuilder::independent

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::heard::ProviderLimits;

mod frame;

pub use crate::operation_id::OperationId;
pub(crate) use frame::{
    allowance, current_id, draw, heard, held_by_ancestor, listen, observed, published, set_breaker,
    swap_children, Frame, Opening,
};
use frame::{allowance_owner, with_ancestors, Lineage};
use tokio::time::Instant;

/// Tells the current call what the provider's answer said of its limits, so that its gates
/// declared `rate = "auto"` (or `learn = true`) learn from it. [`crate::http::classify`] and
/// the middleware call it for every answer; call it yourself with another HTTP client.
/// The gates learn from it when the poll that heard it ends, without waiting for the call to
/// end. Outside a call, or in one whose gates do not learn, it does nothing; so does a
/// spawned task, even one carrying the operation: a body that sends its request from a task
/// hands the answer's headers back and reports them itself.
///
/// ```
/// use resil_runtime::{operation, Policy, ProviderLimits, Quota, Rejected};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let policy = Policy::builder().rate_learn().build().unwrap();
/// let said = Quota { limit: Some(10), remaining: 0, reset: Duration::from_secs(1), window: None };
/// let first: Result<(), Rejected> = policy
///     .run(|| async {
///         operation::report_limits(ProviderLimits { requests: Some(said), tokens: None });
///         Ok(())
///     })
///     .await;
/// assert!(first.is_ok());
/// let gate = policy.rate_gate().unwrap();
/// assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(1)), "nothing left until the reset");
/// # }
/// ```
pub fn report_limits(limits: ProviderLimits) {
    if !limits.is_empty() {
        frame::hear(limits);
    }
}

/// What the current call knows of its logical operation: its id, its attempt, its deadline.
///
/// `Operation::current()` is `None` outside any `#[resilient]` call or `Policy::run`.
///
/// ```
/// use resil_runtime::{Operation, Policy, Rejected};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// assert!(Operation::current().is_none());
/// let policy = Policy::builder().deadline(Duration::from_secs(10)).build().unwrap();
/// let remaining = policy
///     .run(|| async { Ok::<_, Rejected>(Operation::current().unwrap().remaining()) })
///     .await;
/// assert_eq!(remaining.unwrap(), Some(Duration::from_secs(10)));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Operation {
    id: OperationId,
    attempt: u32,
    deadline: Option<Instant>,
    allowance: Option<u32>,
    owner: Option<Arc<str>>,
}

impl Operation {
    /// The operation the current task is running, as the innermost call sees it, if any.
    pub fn current() -> Option<Operation> {
        with_ancestors(|frames| {
            let frames = Lineage::of_top(frames);
            let top = frames.clone().next()?;
            let owner = allowance_owner(frames.clone());
            let (allowance, owner) = owner.map_or((None, None), |f| (f.left(), f.owner()));
            let attempt = frames.last().map_or(0, Frame::retries);
            Some(Operation {
                id: top.id(),
                attempt,
                deadline: top.deadline,
                allowance,
                owner,
            })
        })
    }

    /// This call's id, stable across its attempts; use it as an `Idempotency-Key`.
    pub fn id(&self) -> OperationId {
        self.id.clone()
    }

    /// The outermost call's id: the same for every call of the operation.
    pub fn operation_id(&self) -> OperationId {
        self.id.operation()
    }

    /// 0 on the first attempt; grows by one with every retry made anywhere in the operation.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Time left before the earliest deadline that applies to this call, if any.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Retries this call may still make, if a layer declared retries.
    pub fn retries_left(&self) -> Option<u32> {
        self.allowance
    }

    /// The policy whose retries this call draws from. Recorded only while an event listener
    /// is set (it costs a reference count per operation), so tracing can say who retries;
    /// `None` otherwise.
    pub fn retry_owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Runs `future` inside this operation: the way to carry it into a spawned task, which
    /// does not inherit it. The carried operation keeps the id and the deadline, and
    /// starts from the retry allowance left when it was captured. Nested calls inside it are
    /// numbered from `{id}.1` on, as if started by a new attempt of the captured call: when
    /// the captured call also starts nested calls of its own, or several futures carry the same
    /// capture, wrap each carried piece of work in its own `#[resilient]` call if their ids
    /// must differ.
    ///
    /// ```
    /// use resil_runtime::{Operation, Policy, Rejected};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let policy = Policy::builder().build().unwrap();
    /// let (outer, carried, plain) = policy
    ///     .run(|| async {
    ///         let operation = Operation::current().unwrap();
    ///         let carried = tokio::spawn(operation.clone().scope(async { Operation::current().map(|o| o.id()) }));
    ///         let plain = tokio::spawn(async { Operation::current().map(|o| o.id()) });
    ///         Ok::<_, Rejected>((operation.id(), carried.await.unwrap(), plain.await.unwrap()))
    ///     })
    ///     .await
    ///     .unwrap();
    /// assert_eq!(carried, Some(outer));
    /// assert_eq!(plain, None);
    /// # }
    /// ```
    pub fn scope<F: Future>(self, future: F) -> Scoped<F> {
        let frame = Frame::carried(
            self.id,
            self.deadline,
            self.allowance,
            self.attempt,
            self.owner,
        );
        Scoped { frame, future }
    }
}

pin_project! {
    /// A future running inside a carried [`Operation`]; see [`Operation::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        frame: Frame,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        published(this.frame, || this.future.poll(cx))
    }
}
