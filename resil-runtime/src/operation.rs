//! One logical operation: an id stable across attempts, one deadline, one retry allowance,
//! seen by every `#[resilient]` call nested inside it.
//!
//! Retries multiply across layers: three layers that each try four times send 64 calls to a
//! dependency that is already failing; an inner 20 s timeout inside an outer 10 s deadline
//! keeps working after the caller has left. So the outermost call opens an *operation* (a
//! context that travels with the task running it) and nested calls respect it:
//!
//! - **Deadline.** A nested call's attempt timeout is the smaller of its own timeout and the
//!   operation's remaining time; once the deadline has passed, nested calls fail with
//!   [`Rejected::DeadlineExceeded`](crate::Rejected::DeadlineExceeded) without calling.
//! - **One retry owner.** The outermost call that declares retries owns the operation's
//!   allowance; every retry anywhere inside draws from it. Three nested layers of `retry = 3`
//!   over a dead dependency make 4 calls, not 64.
//! - **Opting out.** `nested = "independent"` ([`PolicyBuilder::independent`]) keeps a call's
//!   own retry count inside an operation. That is right when the inner call is a separate
//!   contract with its own budget (a different team's service, a queue hand-off whose
//!   retries the caller never sees), and wrong for plain layering, where it multiplies.
//!
//! The context lives in the task that runs the operation: it is put in place around every
//! poll of an attempt and taken back after, so a task started with `tokio::spawn` does not
//! see it. Carry it explicitly with [`Operation::scope`].
//!
//! [`PolicyBuilder::independent`]: crate::PolicyBuilder::independent

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;

thread_local! {
    /// The operation of the attempt being polled on this thread, if any.
    static CURRENT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

/// The operation's shared state, owned by the outermost call and lent to each poll.
pub(crate) struct Context {
    /// The id's sequence number, drawn on first use (0: not yet).
    sequence: Cell<u64>,
    deadline: Option<Instant>,
    /// Retries left for the whole operation; `None` until a layer declaring retries owns it.
    allowance: Cell<Option<u32>>,
    /// Retries made so far, by any layer.
    retries: Cell<u32>,
    /// The policy that owns the allowance; recorded only when someone listens to events.
    owner: Cell<Option<Arc<str>>>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("sequence", &self.sequence.get())
            .field("deadline", &self.deadline)
            .field("allowance", &self.allowance.get())
            .field("retries", &self.retries.get())
            .finish()
    }
}

impl Context {
    pub(crate) fn new(deadline: Option<Instant>, allowance: Option<u32>) -> Self {
        Context {
            sequence: Cell::new(0),
            deadline,
            allowance: Cell::new(allowance),
            retries: Cell::new(0),
            owner: Cell::new(None),
        }
    }

    pub(crate) fn set_owner(&self, owner: &Arc<str>) {
        self.owner.set(Some(Arc::clone(owner)));
    }

    fn owner(&self) -> Option<Arc<str>> {
        let owner = self.owner.take();
        self.owner.set(owner.clone());
        owner
    }

    pub(crate) fn id(&self) -> OperationId {
        if self.sequence.get() == 0 {
            self.sequence.set(OperationId::next_sequence());
        }
        OperationId::new(self.sequence.get())
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Takes ownership of the allowance if no layer has yet.
    pub(crate) fn claim(&self, retries: u32) -> bool {
        if self.allowance.get().is_none() && retries > 0 {
            self.allowance.set(Some(retries));
            return true;
        }
        false
    }

    pub(crate) fn allowance(&self) -> Option<u32> {
        self.allowance.get()
    }

    /// Draws one retry from the allowance; false when it is spent.
    pub(crate) fn draw(&self) -> bool {
        match self.allowance.get() {
            Some(0) => false,
            Some(left) => {
                self.allowance.set(Some(left - 1));
                self.retries.set(self.retries.get() + 1);
                true
            }
            None => {
                self.retries.set(self.retries.get() + 1);
                true
            }
        }
    }

    /// Counts a retry made by an independent layer (it draws nothing).
    pub(crate) fn count_retry(&self) {
        self.retries.set(self.retries.get() + 1);
    }

    fn snapshot(&self) -> Operation {
        Operation {
            id: self.id(),
            attempt: self.retries.get(),
            deadline: self.deadline,
            allowance: self.allowance.get(),
            owner: self.owner(),
        }
    }
}

/// Runs `f` on the current operation's context, if there is one.
pub(crate) fn with_current<R>(f: impl FnOnce(&Context) -> R) -> Option<R> {
    CURRENT.with(|current| current.borrow().as_ref().map(f))
}

/// Runs `f` (one poll of an attempt) with `context` as the current operation, then takes it
/// back, also when `f` panics. With `None`, `f` runs in whatever operation is current.
#[inline]
pub(crate) fn enter<R>(context: &mut Option<Context>, f: impl FnOnce() -> R) -> R {
    if context.is_none() {
        return f();
    }
    struct Restore<'a>(&'a mut Option<Context>);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            CURRENT.with(|current| std::mem::swap(&mut *current.borrow_mut(), self.0));
        }
    }
    CURRENT.with(|current| std::mem::swap(&mut *current.borrow_mut(), context));
    let _restore = Restore(context);
    f()
}

/// The id of one logical operation: the same for all its attempts, different for every
/// operation of the process (and, through a random prefix, of other processes). Use it as an
/// `Idempotency-Key` so a retried request is not processed twice.
///
/// ```
/// use resil_runtime::{Operation, Policy, Rejected};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = Policy::builder().retry(2).build().unwrap();
/// let keys = std::sync::Mutex::new(Vec::new());
/// let _: Result<(), Rejected> = policy
///     .run(|| async {
///         keys.lock().unwrap().push(Operation::current().unwrap().id().to_string());
///         Err(Rejected::Timeout { after: std::time::Duration::from_secs(1) })
///     })
///     .await;
/// let keys = keys.into_inner().unwrap();
/// assert_eq!(keys.len(), 3);
/// assert!(keys.iter().all(|key| *key == keys[0]));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId {
    process: u64,
    sequence: u64,
}

impl OperationId {
    fn next_sequence() -> u64 {
        static SEQUENCE: AtomicU64 = AtomicU64::new(1);
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    }

    fn new(sequence: u64) -> Self {
        static PROCESS: OnceLock<u64> = OnceLock::new();
        OperationId {
            process: *PROCESS.get_or_init(rand::random),
            sequence,
        }
    }
}

/// 33 characters, safe in an HTTP header: `5f2a9c1e7b3d4a60-0000000000000001`.
impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{:016x}", self.process, self.sequence)
    }
}

/// What the current logical operation knows: its id, its attempt, its deadline.
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
    /// The operation the current task is running, if any.
    pub fn current() -> Option<Operation> {
        with_current(Context::snapshot)
    }

    /// Stable across attempts; use it as an `Idempotency-Key`.
    pub fn id(&self) -> OperationId {
        self.id
    }

    /// 0 on the first attempt; grows by one with every retry made anywhere in the operation.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Time left before the operation's deadline, if it has one.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// Retries the operation may still make, if a layer declared retries.
    pub fn retries_left(&self) -> Option<u32> {
        self.allowance
    }

    /// The policy whose retries the operation draws from. Recorded only while an event
    /// listener is set (it costs a reference count per operation), so tracing can say who
    /// retries; `None` otherwise.
    pub fn retry_owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Runs `future` inside this operation: the way to carry it into a spawned task, which
    /// does not inherit it. The carried operation keeps the id and the deadline, and
    /// starts from the retry allowance left when it was captured.
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
        let context = Context {
            sequence: Cell::new(self.id.sequence),
            deadline: self.deadline,
            allowance: Cell::new(self.allowance),
            retries: Cell::new(self.attempt),
            owner: Cell::new(self.owner),
        };
        Scoped {
            context: Some(context),
            future,
        }
    }
}

pin_project! {
    /// A future running inside a carried [`Operation`]; see [`Operation::scope`].
    #[derive(Debug)]
    #[must_use = "futures do nothing unless polled"]
    pub struct Scoped<F> {
        context: Option<Context>,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let future = this.future;
        enter(this.context, || future.poll(cx))
    }
}
