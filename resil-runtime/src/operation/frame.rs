//! Each call's [`Frame`], and the chain of frames of the calls whose code runs on this thread.
//!
//! A call keeps its frame in place, in its own state. While its body is polled (or its
//! listener hears an event) the frame is *published*: a node on the machine stack of
//! [`published`] links it to the frames published around it, and a thread-local points at the
//! innermost node. A nested call reads and counts in its ancestors' frames through that chain.
//! Nothing is moved: where a thread-local stack of frames moved each frame in and out at every
//! poll (165 instructions of a ready call's 586, `benches/instructions`), publishing costs a
//! thread-local read and two writes.
//!
//! This is the crate's one `unsafe`: following a node's pointers. It is sound because a node
//! lives exactly as long as the `published` call that links it, which unlinks it before it
//! returns (on unwind too), and borrows its frame for that long; and because a reader gets its
//! references inside a closure ([`with_ancestors`]) that all those calls enclose. Frames
//! change only through `Cell`s, so shared references are all anyone holds.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use tokio::time::Instant;

use crate::heard::ProviderLimits;
use crate::operation_id::{OperationId, Path};

thread_local! {
    /// The node of the innermost call whose body (or listener) runs on this thread; null
    /// outside any.
    static TOP: Cell<*const Node> = const { Cell::new(ptr::null()) };
    /// What the bodies of calls whose gates learn reported during their polls, and when, by
    /// the call's depth in the chain: each taken before its call's poll ends.
    static HEARD: RefCell<Vec<Option<(ProviderLimits, Instant)>>> = const { RefCell::new(Vec::new()) };
}

/// A published frame and the node published around it: on the machine stack of the
/// [`published`] call that links it.
struct Node {
    frame: *const Frame,
    parent: *const Node,
}

/// One `#[resilient]` call's place in its operation, kept in the call's own state.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The operation's sequence number; 0 until an outermost call's id is first asked for.
    sequence: Cell<u64>,
    /// Started inside another call (or a carried operation).
    pub(crate) nested: bool,
    path: Path,
    /// Nested calls started by the current attempt.
    children: Cell<u32>,
    pub(crate) deadline: Option<Instant>,
    /// Retries left, when this call owns an allowance.
    allowance: Cell<Option<u32>>,
    /// Retries made anywhere in the operation (kept on the outermost frame).
    retries: Cell<u32>,
    /// The breaker this call goes through (its address), or 0: held whenever the call's body
    /// runs, since a body runs only once the breaker admitted it.
    breaker: Cell<usize>,
    /// The policy owning the allowance; recorded only when someone listens to events.
    owner: Option<Arc<str>>,
    /// The call's gates learn: what its body reports of the provider's limits is kept.
    listening: Cell<bool>,
}

impl Frame {
    /// The frame of a carried operation ([`crate::Operation::scope`]).
    pub(crate) fn carried(
        id: OperationId,
        deadline: Option<Instant>,
        allowance: Option<u32>,
        attempt: u32,
        owner: Option<Arc<str>>,
    ) -> Frame {
        Frame {
            sequence: Cell::new(id.sequence),
            nested: true,
            path: id.path,
            children: Cell::new(0),
            deadline,
            allowance: Cell::new(allowance),
            retries: Cell::new(attempt),
            breaker: Cell::new(0),
            owner,
            listening: Cell::new(false),
        }
    }

    /// A new attempt of this call: its nested calls are numbered afresh, so a retried parent
    /// re-derives the same ids.
    pub(crate) fn new_attempt(&self) {
        self.children.set(0);
    }

    fn sequence(&self) -> u64 {
        if self.sequence.get() == 0 {
            self.sequence.set(OperationId::next_sequence());
        }
        self.sequence.get()
    }

    /// The breaker the call now goes through (its address; 0: none): a route's next target's.
    pub(crate) fn set_breaker(&self, breaker: usize) {
        self.breaker.set(breaker);
    }

    pub(crate) fn id(&self) -> OperationId {
        OperationId::new(self.sequence(), self.path.clone())
    }

    /// Swaps this call's count of nested calls with `children`: each racer of a hedged call
    /// numbers its own nested calls, so that every racer derives the same ids for the same
    /// call.
    pub(crate) fn swap_children(&self, children: &mut u32) {
        *children = self.children.replace(*children);
    }

    /// Whether this call owns a retry allowance.
    pub(crate) fn owns(&self) -> bool {
        self.allowance.get().is_some()
    }

    /// What is left of this call's own allowance, if it owns one.
    pub(crate) fn left(&self) -> Option<u32> {
        self.allowance.get()
    }

    /// The policy owning this call's allowance, if recorded.
    pub(crate) fn owner(&self) -> Option<Arc<str>> {
        self.owner.clone()
    }

    /// Retries made anywhere in the operation, on its outermost frame.
    pub(crate) fn retries(&self) -> u32 {
        self.retries.get()
    }

    /// Retries this call may still draw, if an allowance governs it: its own, or that of the
    /// nearest call around it that owns one.
    pub(crate) fn allowance(&self) -> Option<u32> {
        self.allowance
            .get()
            .or_else(|| with_ancestors(|mut frames| frames.find_map(|f| f.allowance.get())))
    }

    /// Counts a retry of this call, drawn from the allowance of its owner (itself, when it
    /// owns one). The caller has checked [`Frame::allowance`] is not spent.
    pub(crate) fn draw(&self) {
        fn spend(frame: &Frame) {
            if let Some(left) = frame.allowance.get() {
                frame.allowance.set(Some(left.saturating_sub(1)));
            }
        }
        let count = |root: &Frame| root.retries.set(root.retries.get().saturating_add(1));
        with_ancestors(|frames| {
            if self.allowance.get().is_some() {
                spend(self);
            } else if let Some(owner) = frames.clone().find(|f| f.allowance.get().is_some()) {
                spend(owner);
            }
            count(frames.last().unwrap_or(self));
        });
    }

    /// This call's gates learn: what its body tells [`hear`] is kept, for [`Frame::heard`] to
    /// take before the poll ends. A nested call is deeper in the chain: its body's reports
    /// are its own. What a body that panicked left at this depth is forgotten.
    pub(crate) fn listen(&self) {
        self.listening.set(true);
        self.heard();
    }

    /// What this call's body reported during this poll, and when.
    #[inline(never)]
    pub(crate) fn heard(&self) -> Option<(ProviderLimits, Instant)> {
        let depth = with_ancestors(|frames| frames.count()) + 1;
        HEARD.with(|heard| heard.borrow_mut().get_mut(depth)?.take())
    }
}

/// Runs `f` with `frame` published as the innermost call's: code that `f` runs on this
/// thread (a nested call, [`crate::Operation::current`], a listener) sees it and the frames
/// published around it. A call not yet polled has no frame: `f` then sees those around it.
#[inline(always)]
pub(crate) fn published<R>(frame: Option<&Frame>, f: impl FnOnce() -> R) -> R {
    let Some(frame) = frame else {
        return f();
    };
    /// Unlinks the node when `published` returns or unwinds.
    struct Unlink(*const Node);
    impl Drop for Unlink {
        #[inline(always)]
        fn drop(&mut self) {
            TOP.with(|top| top.set(self.0));
        }
    }
    let node = Node {
        frame: ptr::from_ref(frame),
        parent: TOP.with(Cell::get),
    };
    let _unlink = Unlink(node.parent);
    TOP.with(|top| top.set(ptr::from_ref(&node)));
    f()
}

/// The frames published on this thread, innermost first, for the length of one
/// [`with_ancestors`] closure.
#[derive(Clone)]
pub(crate) struct Ancestors<'a> {
    node: *const Node,
    frames: PhantomData<&'a Frame>,
}

impl<'a> Iterator for Ancestors<'a> {
    type Item = &'a Frame;

    #[allow(unsafe_code)]
    fn next(&mut self) -> Option<&'a Frame> {
        // SAFETY: `TOP` and every node's `parent` are null or point to a `Node` on the stack
        // of a `published` call still running on this thread: each call links its node for
        // the length of `f` and unlinks it before returning, on unwind too (`Unlink`), and
        // the calls nest, so a parent outlives its children. Each node's frame is borrowed by
        // its `published` call for as long. `'a` is the length of a `with_ancestors` closure,
        // which every node seen then encloses, so no reference outlives its node; the frames
        // change only through `Cell`s, and nothing holds a `&mut` to a frame while it is
        // borrowed by `published`.
        let node = unsafe { self.node.as_ref() }?;
        self.node = node.parent;
        // SAFETY: as above: the node's frame is borrowed for at least `'a`.
        Some(unsafe { &*node.frame })
    }
}

/// Runs `f` on the frames published on this thread, innermost first.
#[inline(always)]
pub(crate) fn with_ancestors<R>(f: impl for<'a> FnOnce(Ancestors<'a>) -> R) -> R {
    f(Ancestors {
        node: TOP.with(Cell::get),
        frames: PhantomData,
    })
}

/// Whether `breaker` is held by a call around the running one: then the running call goes
/// through as part of it.
pub(crate) fn held_by_ancestor(breaker: usize) -> bool {
    with_ancestors(|mut frames| frames.any(|frame| frame.breaker.get() == breaker))
}

/// Keeps what the body of the innermost published call reports of the provider's limits, if
/// its gates learn.
pub(crate) fn hear(limits: ProviderLimits) {
    let depth = with_ancestors(|mut frames| {
        let top = frames.next()?;
        top.listening.get().then(|| frames.count() + 1)
    });
    if let Some(depth) = depth {
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
    /// Makes the call's frame in `slot`, nested in the innermost published one if there is
    /// one: at the call's first poll, where the chain shows the calls around it. Written in
    /// place, as the call's state is, rather than made and moved in.
    #[inline]
    pub(crate) fn open(self, slot: &mut Option<Frame>) -> &Frame {
        let frame = slot.insert(Frame {
            sequence: Cell::new(0),
            nested: false,
            path: Path::ROOT,
            children: Cell::new(0),
            deadline: self.deadline,
            allowance: Cell::new(None),
            retries: Cell::new(0),
            breaker: Cell::new(self.breaker),
            owner: None,
            listening: Cell::new(false),
        });
        with_ancestors(|mut frames| {
            let parent = frames.next();
            let has_owner = parent.is_some_and(|parent| {
                parent.allowance.get().is_some()
                    || frames.any(|frame| frame.allowance.get().is_some())
            });
            if self.retry > 0 && (self.independent || !has_owner) {
                frame.allowance.set(Some(self.retry));
                frame.owner = self.name.cloned();
            }
            if let Some(parent) = parent {
                let n = parent.children.get().saturating_add(1);
                parent.children.set(n);
                frame.nested = true;
                frame.sequence.set(parent.sequence());
                frame.path = parent.path.child(n);
                frame.deadline = earliest(parent.deadline, self.deadline);
            }
        });
        frame
    }
}
