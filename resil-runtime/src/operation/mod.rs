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
//! state; around every poll of an attempt the frame is pushed on a thread-local stack and
//! taken back after, so nested calls see their ancestors and a task started with
//! `tokio::spawn` does not. Carry the operation into one explicitly with [`Operation::scope`].
//!
//! [`PolicyBuilder::independent`]: crate::PolicyBuilder::independent

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

use crate::heard::ProviderLimits;

pub use crate::operation_id::OperationId;
use crate::operation_id::Path;
use tokio::time::Instant;

thread_local! {
    /// The frames of the calls being polled on this thread, outermost first.
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    /// What the bodies of calls whose gates learn reported during their polls, and when, by
    /// the call's depth on the stack: each taken before its call's poll ends.
    static HEARD: RefCell<Vec<Option<(ProviderLimits, Instant)>>> = const { RefCell::new(Vec::new()) };
}

/// One `#[resilient]` call's place in its operation. Kept by the call between polls, pushed on
/// the thread's stack during each poll of one of its attempts.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The operation's sequence number; 0 until an outermost call's id is first asked for.
    sequence: u64,
    /// Started inside another call (or a carried operation).
    nested: bool,
    path: Path,
    /// Nested calls started by the current attempt.
    children: u32,
    deadline: Option<Instant>,
    /// Retries left, when this call owns an allowance.
    allowance: Option<u32>,
    /// Retries made anywhere in the operation (kept on the outermost frame).
    retries: u32,
    /// The breaker this call goes through (its address), or 0: held whenever the call's body
    /// runs, since a body runs only once the breaker admitted it.
    breaker: usize,
    /// The policy owning the allowance; recorded only when someone listens to events.
    owner: Option<Arc<str>>,
    /// The call's gates learn: what its body reports of the provider's limits is kept.
    listening: bool,
}

impl Frame {
    /// A new attempt of this call: its nested calls are numbered afresh, so a retried parent
    /// re-derives the same ids.
    pub(crate) fn new_attempt(&mut self) {
        self.children = 0;
    }

    fn sequence(&mut self) -> u64 {
        if self.sequence == 0 {
            self.sequence = OperationId::next_sequence();
        }
        self.sequence
    }

    /// The breaker the call now goes through (its address; 0: none): a route's next target's.
    pub(crate) fn set_breaker(&mut self, breaker: usize) {
        self.breaker = breaker;
    }

    pub(crate) fn id(&mut self) -> OperationId {
        OperationId::new(self.sequence(), self.path.clone())
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a call brings to its frame when it starts: its own deadline, its own retry count
/// (`name` is recorded as the owner when it owns retries) and the breaker it goes through
/// (its address; 0: none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening<'a> {
    pub(crate) deadline: Option<Instant>,
    pub(crate) retry: u32,
    pub(crate) independent: bool,
    pub(crate) name: Option<&'a Arc<str>>,
    pub(crate) breaker: usize,
}

impl Opening<'_> {
    /// The frame, nested in the top of `stack` if there is one.
    #[inline]
    fn frame(self, stack: &mut [Frame]) -> Frame {
        let mut frame = Frame {
            sequence: 0,
            nested: false,
            path: Path::ROOT,
            children: 0,
            deadline: self.deadline,
            allowance: None,
            retries: 0,
            breaker: self.breaker,
            owner: None,
            listening: false,
        };
        let has_owner = stack.iter().any(|frame| frame.allowance.is_some());
        if let Some(parent) = stack.last_mut() {
            frame.nested = true;
            parent.children = parent.children.saturating_add(1);
            frame.sequence = parent.sequence();
            frame.path = parent.path.child(parent.children);
            frame.deadline = earliest(parent.deadline, self.deadline);
        }
        if self.retry > 0 && (self.independent || !has_owner) {
            frame.allowance = Some(self.retry);
            frame.owner = self.name.cloned();
        }
        frame
    }
}

/// Starts a call's frame on top of the thread's stack, where its first poll needs it: made in
/// place rather than made, kept and moved in. Returns it pushed, with the deadline it sees
/// and whether it is nested.
#[inline]
pub(crate) fn enter(opening: Opening<'_>) -> (Pushed, Option<Instant>, bool) {
    STACK.with(|stack| {
        let mut stack = stack.borrow_mut();
        let frame = opening.frame(&mut stack);
        let seen = (frame.deadline, frame.nested);
        stack.push(frame);
        (Pushed(()), seen.0, seen.1)
    })
}

/// Puts `frame` on top of the thread's stack for one poll of an attempt; [`Pushed::pop`] takes
/// it back after the poll.
#[inline]
pub(crate) fn push(frame: Frame) -> Pushed {
    STACK.with(|stack| stack.borrow_mut().push(frame));
    Pushed(())
}

/// A frame on the thread's stack. Dropped without [`Pushed::pop`] (the call is over, or the
/// poll panicked), it takes the frame off, so no later poll on this thread sees it as an
/// ancestor.
#[must_use = "pop the frame after the poll"]
#[derive(Debug)]
pub(crate) struct Pushed(());

impl Pushed {
    #[inline]
    pub(crate) fn pop(self) -> Option<Frame> {
        std::mem::forget(self);
        STACK.with(|stack| stack.borrow_mut().pop())
    }
}

impl Drop for Pushed {
    fn drop(&mut self) {
        STACK.with(|stack| stack.borrow_mut().pop());
    }
}

/// Runs `f` on the stack, if a call is being polled. Called only while a frame is pushed, where
/// the top frame is the polled call's.
fn with_stack<R>(f: impl FnOnce(&mut [Frame]) -> R) -> Option<R> {
    STACK.with(|stack| {
        let mut stack = stack.borrow_mut();
        (!stack.is_empty()).then(|| f(&mut stack))
    })
}

/// The index of the frame whose allowance the top frame draws from.
fn owner_index(stack: &[Frame]) -> Option<usize> {
    stack.iter().rposition(|frame| frame.allowance.is_some())
}

/// Retries the polled call may still draw, if an allowance governs it.
pub(crate) fn allowance() -> Option<u32> {
    with_stack(|stack| owner_index(stack).and_then(|owner| stack[owner].allowance)).flatten()
}

/// Counts a retry of the polled call, drawn from the allowance of its owner (itself, when it
/// owns one). The caller has checked [`allowance`] is not spent.
pub(crate) fn draw() {
    with_stack(|stack| {
        if let Some(owner) = owner_index(stack) {
            if let Some(left) = stack[owner].allowance {
                stack[owner].allowance = Some(left.saturating_sub(1));
            }
        }
        stack[0].retries = stack[0].retries.saturating_add(1);
    });
}

/// Swaps the polled call's count of nested calls with `children`: each racer of a hedged call
/// numbers its own nested calls, so that every racer derives the same ids for the same call.
pub(crate) fn swap_children(children: &mut u32) {
    with_stack(|stack| {
        if let Some(top) = stack.last_mut() {
            std::mem::swap(&mut top.children, children);
        }
    });
}

/// The polled call's gates learn: what its body tells [`report_limits`] is kept, for
/// [`heard`] to take before the poll ends. A nested call is deeper on the stack: its body's
/// reports are its own. What a body that panicked left at this depth is forgotten.
pub(crate) fn listen() {
    with_stack(|stack| {
        if let Some(top) = stack.last_mut() {
            top.listening = true;
        }
    });
    heard();
}

/// What the polled call's body reported during this poll, and when.
#[inline(never)]
pub(crate) fn heard() -> Option<(ProviderLimits, Instant)> {
    let depth = depth();
    HEARD.with(|heard| heard.borrow_mut().get_mut(depth)?.take())
}

/// Frames on the thread's stack: the polled call's depth.
fn depth() -> usize {
    STACK.with(|stack| stack.borrow().len())
}

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
    if limits.is_empty() {
        return;
    }
    let listening = with_stack(|stack| {
        let top = stack.last()?;
        top.listening.then_some(stack.len())
    });
    if let Some(depth) = listening.flatten() {
        HEARD.with(|heard| {
            let mut heard = heard.borrow_mut();
            if heard.len() <= depth {
                heard.resize(depth + 1, None);
            }
            // A reset counts from when it was said, not from when the call ends.
            heard[depth] = Some((limits, Instant::now()));
        });
    }
}

/// The id of the polled call.
pub(crate) fn current_id() -> Option<OperationId> {
    with_stack(|stack| stack.last_mut().map(Frame::id)).flatten()
}

/// Is `breaker` held by a call enclosing the polled one? Then the polled call goes through as
/// part of it.
pub(crate) fn held_by_ancestor(breaker: usize) -> bool {
    with_stack(|stack| {
        stack
            .split_last()
            .is_some_and(|(_, ancestors)| ancestors.iter().any(|frame| frame.breaker == breaker))
    })
    .unwrap_or(false)
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
        with_stack(|stack| {
            let owner = owner_index(stack).map(|owner| &stack[owner]);
            let (allowance, owner) = owner.map_or((None, None), |f| (f.allowance, f.owner.clone()));
            let attempt = stack[0].retries;
            let top = stack.last_mut()?;
            Some(Operation {
                id: top.id(),
                attempt,
                deadline: top.deadline,
                allowance,
                owner,
            })
        })
        .flatten()
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
        let frame = Frame {
            sequence: self.id.sequence,
            nested: true,
            path: self.id.path,
            children: 0,
            deadline: self.deadline,
            allowance: self.allowance,
            retries: self.attempt,
            breaker: 0,
            owner: self.owner,
            listening: false,
        };
        Scoped {
            frame: Some(frame),
            future,
        }
    }
}

pin_project! {
    /// A future running inside a carried [`Operation`]; see [`Operation::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        frame: Option<Frame>,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let pushed = this.frame.take().map(push);
        let poll = this.future.poll(cx);
        if let Some(pushed) = pushed {
            *this.frame = pushed.pop();
        }
        poll
    }
}
