//! Streams: a call that answers over time, such as a chat completion streamed as server-sent
//! events.
//!
//! An attempt lasts from the call to the stream's first item: that is the **commit point**.
//! Before it, a transient error (from the connect, or as the first item), the attempt's
//! timeout (the time to the first item) or a stream that ends before its first item
//! ([`Rejected::Incomplete`]) is retried under the policy's usual rules. The operation returns
//! `Ok(stream)` only once the first item is in hand; after that nothing is retried, and later
//! errors are items the consumer sees.
//!
//! When the first items carry no content (OpenAI's first chunk holds only the role), a commit
//! test moves the commit point to the first item it accepts ([`Commit`], given to
//! [`Policy::run_stream_until`](crate::Policy::run_stream_until) or
//! [`Execution::attempt_stream_until`](crate::Execution::attempt_stream_until), or
//! `commit_when = Chunk::has_content` on the attribute): the items before it are held, then
//! handed over in order at the commit, and a stall, an error or an end before it is retried
//! like a stall before the first item. The final item commits too. Keep-alive comments
//! (`: ping`) are not items: an SSE decoder drops them.
//!
//! The commit phase is bounded however the provider behaves: at most `commit_hold` items
//! (10 000 unless set) are held, one more ends the attempt with [`Rejected::Uncommitted`]
//! (transient, so retried); and items that are always ready cannot keep the thread, since the
//! attempt lets the scheduler run every 128 of them, when its time limits are checked. The
//! returned [`ResilientStream`] then:
//!
//! - ends with one `Err(Rejected::Idle { after })` when no item arrives within the policy's
//!   `idle_timeout` of the previous one, and with one `Err(Rejected::DeadlineExceeded)` when
//!   the operation's deadline passes (the deadline bounds the whole stream, to its last item,
//!   however fast the body answers and however slowly the consumer reads);
//! - ends at the item that [`ResilientStream::complete_when`] recognises as the final one:
//!   what the body sends or does afterwards (more items, a connection held open) is not read;
//! - ends with one `Err(Rejected::Incomplete)` when the body's stream ends before an item
//!   that [`ResilientStream::complete_when`] recognises as the final one (unless it yielded
//!   an error already);
//! - holds the bulkhead permit (and the per-key breaker) until it ends or is dropped;
//! - counts, for the breaker, the first item as the attempt's success, and a transient error,
//!   an idle timeout or an incomplete end after it as one failure; a consumer that drops the
//!   stream counts for nothing.
//!
//! ```
//! use futures::StreamExt;
//! use resil_runtime::{Policy, Rejected};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let policy = Policy::builder()
//!     .timeout(Duration::from_secs(20)) // to the first item, connect included
//!     .idle_timeout(Duration::from_secs(30))
//!     .retry(2)
//!     .build()
//!     .unwrap();
//! let stream = policy
//!     .run_stream(|| async {
//!         Ok::<_, Rejected>(futures::stream::iter(["Hel", "lo", "[DONE]"].map(Ok)))
//!     })
//!     .await
//!     .unwrap()
//!     .complete_when(|chunk: &&str| *chunk == "[DONE]");
//! let chunks: Vec<_> = stream.collect().await;
//! assert_eq!(chunks, [Ok("Hel"), Ok("lo"), Ok("[DONE]")]);
//! # }
//! ```

use std::fmt;
use std::future::{poll_fn, Future};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::bulkhead::BulkheadPermit;
use crate::deadline::later;
use crate::events::{self, Listener};
use crate::policy::{BreakerRef, Scope};
use crate::registry::Held;
use crate::{Rejected, Transient};

/// The `Stream` trait of `futures` (the same trait, re-exported), for signatures such as
/// `Result<impl Stream<Item = Result<T, E>>, E>`.
pub use futures_core::Stream;

/// Where a streaming call commits, and which item completes its answer (see the
/// [module docs](self)).
///
/// The final item commits too: an answer that is complete without content (a role chunk,
/// then the final one) is an answer, and a server that holds the connection open after it
/// must not stall the attempt. The stream the call returns then ends at the final item, as
/// [`ResilientStream::complete_when`] says.
///
/// ```
/// use resil_runtime::stream::Commit;
///
/// let commit = Commit::when(|chunk: &&str| !chunk.is_empty()).complete_when(|chunk| *chunk == "[DONE]");
/// assert!(!commit.commits(&""));
/// assert!(commit.commits(&"Hello"));
/// assert!(commit.commits(&"[DONE]"));
/// ```
pub struct Commit<T> {
    commits: fn(&T) -> bool,
    is_final: Option<fn(&T) -> bool>,
}

impl<T> Commit<T> {
    /// The first item commits: what [`Policy::run_stream`](crate::Policy::run_stream) does.
    pub fn first_item() -> Self {
        Commit {
            commits: |_| true,
            is_final: None,
        }
    }

    /// The first item that `commits` accepts commits (such as the first with content): the
    /// items before it are held, then handed over in order.
    pub fn when(commits: fn(&T) -> bool) -> Self {
        Commit {
            commits,
            is_final: None,
        }
    }

    /// Names the final item: it commits too, and the returned stream ends at it, or with
    /// [`Rejected::Incomplete`] if the body's stream ends before it.
    pub fn complete_when(mut self, is_final: fn(&T) -> bool) -> Self {
        self.is_final = Some(is_final);
        self
    }

    /// Does `item` commit the stream?
    pub fn commits(&self, item: &T) -> bool {
        (self.commits)(item) || self.is_final.is_some_and(|is_final| is_final(item))
    }
}

impl<T> Clone for Commit<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Commit<T> {}

impl<T> fmt::Debug for Commit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit")
            .field("complete_when", &self.is_final.is_some())
            .finish_non_exhaustive()
    }
}

/// A stream whose committing item is in hand: what one successful attempt of a streaming
/// call yields. Boxed once per stream, since a stream that has been polled cannot move.
pub struct Committed<T, S> {
    /// Items before the committing one (none unless a commit test held some back).
    held: Vec<T>,
    first: T,
    rest: Pin<Box<S>>,
    is_final: Option<fn(&T) -> bool>,
}

impl<T, S> fmt::Debug for Committed<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Committed").finish_non_exhaustive()
    }
}

/// Ready items read in a row before the commit loop lets the scheduler run, as tokio's
/// cooperative budget does: a provider whose items are always ready (role-only chunks,
/// keep-alives) cannot keep the thread, and the attempt's time limits, armed when its body
/// first yields, hold for it too.
const READY_IN_A_ROW: u32 = 128;

/// One attempt of a streaming call: the connect, then the items up to the first that
/// commits (the first item, unless told otherwise). Items before it are held, at most
/// `hold` of them, and handed over in order at the commit; an error, an end or one item too
/// many before it fails the attempt, which the policy may retry.
pub(crate) async fn committing_item<T, E, S, Fut>(
    connect: Fut,
    commit: Commit<T>,
    hold: usize,
) -> Result<Committed<T, S>, E>
where
    Fut: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>>,
    E: From<Rejected>,
{
    let mut rest = Box::pin(connect.await?);
    let mut held = Vec::new();
    let mut in_a_row = 0;
    loop {
        let next = poll_fn(|cx| {
            if in_a_row == READY_IN_A_ROW {
                in_a_row = 0;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let next = rest.as_mut().poll_next(cx);
            in_a_row = if next.is_ready() { in_a_row + 1 } else { 0 };
            next
        })
        .await;
        match next {
            Some(Ok(item)) if commit.commits(&item) => {
                return Ok(Committed {
                    held,
                    first: item,
                    rest,
                    is_final: commit.is_final,
                })
            }
            Some(Ok(_)) if held.len() >= hold => {
                return Err(E::from(Rejected::Uncommitted {
                    held: held.len() + 1,
                }))
            }
            Some(Ok(item)) => held.push(item),
            Some(Err(error)) => return Err(error),
            None => return Err(E::from(Rejected::Incomplete)),
        }
    }
}

/// What an operation hands to its stream at the commit point.
pub(crate) struct Holdings<'p> {
    pub(crate) listener: Option<&'p Arc<dyn Listener>>,
    pub(crate) breaker: Option<BreakerRef<'p>>,
    /// The key's state, for a keyed policy: held until the stream ends.
    pub(crate) scope: Option<Held<Scope>>,
    pub(crate) permit: Option<BulkheadPermit<'p>>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) idle: Option<Duration>,
}

/// The stream a streaming call returns once committed (see the [module docs](self)): the
/// body's stream under the idle timeout and the deadline, holding the bulkhead permit until
/// it ends. `Send` whenever the body's stream, its items and errors are; `Unpin` always, so
/// `stream.next().await` works without pinning.
#[must_use = "a stream does nothing unless polled, and holds its bulkhead permit until dropped"]
pub struct ResilientStream<'p, T, E, S> {
    /// The items held before the commit, then the committing one.
    held: std::vec::IntoIter<T>,
    first: Option<T>,
    /// `None` once the stream has ended: the body's stream, permit and breaker are gone.
    rest: Option<Pin<Box<S>>>,
    holdings: Holdings<'p>,
    /// Boxed when first armed, then reset for each gap.
    timer: Option<Pin<Box<Sleep>>>,
    /// The timer stands for a gap that an item has since closed.
    stale: bool,
    /// The armed timer is the idle timeout (else the deadline).
    idle_cut: bool,
    complete_when: Option<fn(&T) -> bool>,
    finished: bool,
    /// An error item was yielded.
    errored: bool,
    /// A failure was counted for the breaker.
    failed: bool,
    error: PhantomData<fn() -> E>,
}

/// No field is ever pinned in place: the body's stream and the timer are boxed.
impl<T, E, S> Unpin for ResilientStream<'_, T, E, S> {}

impl<T, E, S> fmt::Debug for ResilientStream<'_, T, E, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResilientStream")
            .field("ended", &self.rest.is_none())
            .field("finished", &self.finished)
            .field("deadline", &self.holdings.deadline)
            .field("idle_timeout", &self.holdings.idle)
            .finish_non_exhaustive()
    }
}

impl<'p, T, E, S> ResilientStream<'p, T, E, S> {
    pub(crate) fn new(committed: Committed<T, S>, holdings: Holdings<'p>) -> Self {
        ResilientStream {
            held: committed.held.into_iter(),
            first: Some(committed.first),
            rest: Some(committed.rest),
            holdings,
            timer: None,
            stale: true,
            idle_cut: false,
            complete_when: committed.is_final,
            finished: false,
            errored: false,
            failed: false,
            error: PhantomData,
        }
    }

    /// Names the final item: a stream that ends before one (and yielded no error, which would
    /// have told the consumer already) yields `Err(Rejected::Incomplete)` as its last item,
    /// and counts as a failure for the breaker. Set it before the first
    /// poll (the first item may be the final one).
    pub fn complete_when(mut self, is_final: fn(&T) -> bool) -> Self {
        self.complete_when = Some(is_final);
        self
    }

    /// Has the final item (per [`ResilientStream::complete_when`]) been seen?
    pub fn is_complete(&self) -> bool {
        self.finished
    }
}

impl<T, E, S> Stream for ResilientStream<'_, T, E, S>
where
    S: Stream<Item = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    type Item = Result<T, E>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(held) = this.held.next() {
            return Poll::Ready(Some(Ok(this.item(held))));
        }
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(this.item(first))));
        }
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Ready(None);
        };
        // Checked before the body is asked, not only while it is pending: a body whose items
        // are always ready, read by a slow consumer, is bounded by the deadline too.
        if this
            .holdings
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            this.end();
            return Poll::Ready(Some(Err(E::from(Rejected::DeadlineExceeded))));
        }
        match rest.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(next))) => Poll::Ready(Some(Ok(this.item(next)))),
            Poll::Ready(Some(Err(error))) => {
                this.stale = true;
                this.errored = true;
                if error.is_transient() {
                    this.fail();
                }
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(None) => {
                // After an error item the consumer knows the stream failed: its end says no more.
                let incomplete = this.complete_when.is_some() && !this.finished && !this.errored;
                if incomplete {
                    this.fail();
                }
                this.end();
                Poll::Ready(incomplete.then(|| Err(E::from(Rejected::Incomplete))))
            }
            Poll::Pending => {
                if this.stale {
                    this.stale = false;
                    if !this.arm() {
                        return Poll::Pending;
                    }
                }
                let fired = this
                    .timer
                    .as_mut()
                    .is_some_and(|timer| timer.as_mut().poll(cx).is_ready());
                if !fired {
                    return Poll::Pending;
                }
                let rejected = match this.holdings.idle {
                    Some(after) if this.idle_cut => {
                        this.fail();
                        Rejected::Idle { after }
                    }
                    _ => Rejected::DeadlineExceeded,
                };
                this.end();
                Poll::Ready(Some(Err(E::from(rejected))))
            }
        }
    }
}

impl<T, E, S> ResilientStream<'_, T, E, S> {
    /// An item for the consumer: notes whether it is the final one, and that the gap it
    /// closed no longer stands.
    /// An item for the consumer. The final one ends the stream: no idle timeout or deadline
    /// can turn a complete answer into a failure, whatever the server does with the
    /// connection afterwards, and the permit goes back with it.
    fn item(&mut self, item: T) -> T {
        self.stale = true;
        if self.complete_when.is_some_and(|is_final| is_final(&item)) {
            self.finished = true;
            self.end();
        }
        item
    }

    /// Arms the timer for the gap starting now: the idle timeout or the deadline, whichever
    /// comes first. Returns whether a limit applies at all.
    fn arm(&mut self) -> bool {
        let idle_end = self.holdings.idle.map(|idle| later(Instant::now(), idle));
        let (at, idle_cut) = match (idle_end, self.holdings.deadline) {
            (Some(idle), Some(deadline)) if deadline <= idle => (deadline, false),
            (Some(idle), _) => (idle, true),
            (None, Some(deadline)) => (deadline, false),
            (None, None) => return false,
        };
        self.idle_cut = idle_cut;
        match &mut self.timer {
            // The deadline alone does not move: the armed timer already stands for it.
            Some(_) if self.holdings.idle.is_none() => {}
            Some(timer) => timer.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        true
    }

    /// Counts the stream's failure for the breaker, once per stream.
    fn fail(&mut self) {
        if std::mem::replace(&mut self.failed, true) {
            return;
        }
        let Some(breaker) = &self.holdings.breaker else {
            return;
        };
        let breaker = breaker.get();
        if let Some(transition) = breaker.record_failure() {
            let listener = self.holdings.listener;
            // Its listener's calls are nested in no call polling the stream.
            crate::operation::observed(|| {
                events::breaker_transition(listener, breaker.into(), transition)
            });
        }
    }

    /// The stream is over: the body's stream (its connection), the bulkhead permit and the
    /// breaker's lease go at once, not when the consumer drops this wrapper.
    fn end(&mut self) {
        self.held = Vec::new().into_iter();
        self.first = None;
        self.rest = None;
        self.timer = None;
        self.holdings.permit = None;
        self.holdings.breaker = None;
        self.holdings.scope = None;
    }
}

/// What a streaming `#[resilient]` function with a `fallback` returns: the primary stream,
/// or the fallback's when the operation failed (boxed: it is the rare path).
#[derive(Debug)]
pub enum OrFallback<P, F> {
    /// The function's own stream.
    Primary(P),
    /// The fallback's stream.
    Fallback(Pin<Box<F>>),
}

impl<P, F> OrFallback<P, F> {
    /// Is this the fallback's stream?
    pub fn is_fallback(&self) -> bool {
        matches!(self, OrFallback::Fallback(_))
    }
}

impl<P, F, I> Stream for OrFallback<P, F>
where
    P: Stream<Item = I> + Unpin,
    F: Stream<Item = I>,
{
    type Item = I;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<I>> {
        match self.get_mut() {
            OrFallback::Primary(stream) => Pin::new(stream).poll_next(cx),
            OrFallback::Fallback(stream) => stream.as_mut().poll_next(cx),
        }
    }
}
