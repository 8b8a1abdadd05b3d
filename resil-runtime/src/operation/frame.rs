//! Each call's [`Frame`], and the chain of frames of the calls being polled on this thread.
//!
//! A call keeps its frame in its own state between polls. For each poll of an attempt the
//! frame is taken into the poll's own locals and *published*: a node on the machine stack of
//! [`published`] links it to the frames published around it, and a thread-local points at the
//! innermost node. Everything the poll runs (the body, the nested calls it starts, a
//! listener, the error's `Transient` methods) sees the call's frame on top and its ancestors
//! below. Below it may also be frames of other operations (a call polled inside another's
//! body): a call reads only its own operation's ([`Lineage`]), each frame knowing its parent
//! by the operation's sequence and the path one step shorter. Where a thread-local `Vec` of frames moved each frame in and out at every poll (165
//! instructions of a ready call's 586, `benches/instructions`), publishing costs a
//! thread-local read and two writes; a call ready at its first poll makes its frame where it
//! is published and moves it nowhere.
//!
//! This is the crate's one `unsafe`: following a node's pointers. It is sound because a node
//! lives exactly as long as the `published` call that links it, which unlinks it before it
//! returns (on unwind too), and borrows its frame for that long; because a reader gets its
//! references inside a closure ([`with_ancestors`]) that all those calls enclose; and because
//! a published frame is a local of the poll publishing it (or the field of the `Scoped`
//! future being polled), which nothing else reaches while it is published. A
//! frame changes only through atomics (relaxed: only its own thread reads it while it is
//! published), so shared references are all anyone holds, and frames stay `Send + Sync`.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use tokio::time::Instant;

use crate::heard::ProviderLimits;
use crate::operation_id::{OperationId, Path};

thread_local! {
    /// The node of the innermost call being polled on this thread; null outside any.
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

/// No allowance: the call draws from an ancestor's, or from none.
const NO_ALLOWANCE: u64 = u64::MAX;

/// One `#[resilient]` call's place in its operation, kept in the call's own state.
#[derive(Debug)]
pub(crate) struct Frame {
    /// The operation's sequence number; 0 until an outermost call's id is first asked for.
    sequence: AtomicU64,
    /// Started inside another call: the frames of its operation go on below it. False for an
    /// outermost call and a carried operation, whose frame ends them (what it carries is all
    /// it knows of its operation).
    pub(crate) nested: bool,
    path: Path,
    /// Nested calls started by the current attempt.
    children: AtomicU32,
    pub(crate) deadline: Option<Instant>,
    /// Retries left, when this call owns an allowance; [`NO_ALLOWANCE`] when it does not.
    allowance: AtomicU64,
    /// Retries made anywhere in the operation (kept on the outermost frame).
    retries: AtomicU32,
    /// The breaker this call goes through (its address), or 0: held whenever the call's body
    /// runs, since a body runs only once the breaker admitted it.
    breaker: AtomicUsize,
    /// The policy owning the allowance; recorded only when someone listens to events.
    owner: Option<Arc<str>>,
    /// The call's gates learn: what its body reports of the provider's limits is kept.
    listening: AtomicBool,
    /// A listener hears one of this call's events: the calls it makes are operations of their
    /// own, which take no number among the calls the body starts.
    observed: AtomicBool,
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
            sequence: AtomicU64::new(id.sequence),
            nested: false,
            path: id.path,
            children: AtomicU32::new(0),
            deadline,
            allowance: AtomicU64::new(allowance.map_or(NO_ALLOWANCE, u64::from)),
            retries: AtomicU32::new(attempt),
            breaker: AtomicUsize::new(0),
            owner,
            listening: AtomicBool::new(false),
            observed: AtomicBool::new(false),
        }
    }

    /// A new attempt of this call: its nested calls are numbered afresh, so a retried parent
    /// re-derives the same ids.
    pub(crate) fn new_attempt(&self) {
        self.children.store(0, Relaxed);
    }

    fn sequence(&self) -> u64 {
        if self.sequence.load(Relaxed) == 0 {
            self.sequence.store(OperationId::next_sequence(), Relaxed);
        }
        self.sequence.load(Relaxed)
    }

    pub(crate) fn id(&self) -> OperationId {
        OperationId::new(self.sequence(), self.path.clone())
    }

    /// What is left of this call's own allowance, if it owns one.
    pub(crate) fn left(&self) -> Option<u32> {
        u32::try_from(self.allowance.load(Relaxed)).ok()
    }

    fn spend(&self) {
        if let Some(left) = self.left() {
            self.allowance
                .store(u64::from(left.saturating_sub(1)), Relaxed);
        }
    }

    /// The policy owning this call's allowance, if recorded.
    pub(crate) fn owner(&self) -> Option<Arc<str>> {
        self.owner.clone()
    }

    /// Retries made anywhere in the operation, on its outermost frame.
    pub(crate) fn retries(&self) -> u32 {
        self.retries.load(Relaxed)
    }

    /// Whether this is the frame of the call that started `child`'s: same operation, and
    /// `child`'s path is this one's and one step.
    fn is_parent_of(&self, child: &Frame) -> bool {
        self.sequence.load(Relaxed) == child.sequence.load(Relaxed)
            && self.path.is_parent_of(&child.path)
    }
}

/// Runs `f` with `frame` published as the innermost call's: what `f` runs on this thread (a
/// nested call, [`crate::Operation::current`], a listener, a `Transient` method) sees it on
/// top and the frames published around it below.
#[inline(always)]
pub(crate) fn published<R>(frame: &Frame, f: impl FnOnce() -> R) -> R {
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
        // change only through atomics, and nothing holds a `&mut` to a frame while it is
        // borrowed by `published`.
        let node = unsafe { self.node.as_ref() }?;
        self.node = node.parent;
        // SAFETY: as above: the node's frame is borrowed for at least `'a`.
        Some(unsafe { &*node.frame })
    }
}

/// Runs `f` on the frames published on this thread, innermost first: the polled call's on
/// top, when one is polled.
#[inline(always)]
pub(crate) fn with_ancestors<R>(f: impl for<'a> FnOnce(Ancestors<'a>) -> R) -> R {
    f(Ancestors {
        node: TOP.with(Cell::get),
        frames: PhantomData,
    })
}

/// A frame and those of the calls of its operation published around it, innermost first: its
/// parent's, its parent's parent's, and so on to the outermost (or a carried operation's),
/// skipping the frames of any other call. A call polled inside another's body (a shared
/// future, a call moved between tasks, a carried operation) is published above frames that
/// are not its operation's: nothing it decides reaches them, nor do they decide for it.
#[derive(Clone)]
pub(crate) struct Lineage<'a> {
    frames: Ancestors<'a>,
    /// The frame given last, whose parent comes next; `None` before the first.
    last: Option<&'a Frame>,
}

impl<'a> Lineage<'a> {
    /// The polled call's frame and its operation's around it.
    pub(crate) fn of_top(frames: Ancestors<'a>) -> Self {
        Lineage { frames, last: None }
    }

    /// The frames of `frame`'s operation around it, with `frames` those published below it.
    fn around(frame: &'a Frame, frames: Ancestors<'a>) -> Self {
        Lineage {
            frames,
            last: Some(frame),
        }
    }
}

impl<'a> Iterator for Lineage<'a> {
    type Item = &'a Frame;

    fn next(&mut self) -> Option<&'a Frame> {
        let frame = match self.last {
            None => self.frames.next()?,
            Some(child) if !child.nested => return None,
            // Most often the next frame published; skipped past only when polled elsewhere.
            Some(child) => self.frames.find(|frame| frame.is_parent_of(child))?,
        };
        self.last = Some(frame);
        Some(frame)
    }
}

/// The frame whose retry allowance the innermost of `frames` draws from: the first that owns
/// one.
pub(crate) fn allowance_owner<'a>(mut frames: Lineage<'a>) -> Option<&'a Frame> {
    frames.find(|frame| frame.left().is_some())
}

/// Retries the polled call may still draw, if an allowance governs it: its own, or that of
/// the nearest call of its operation around it that owns one.
pub(crate) fn allowance() -> Option<u32> {
    with_ancestors(|frames| allowance_owner(Lineage::of_top(frames)).and_then(Frame::left))
}

/// Counts a retry of the polled call, drawn from the allowance of its owner (itself, when it
/// owns one), on its operation's outermost frame published. The caller has checked
/// [`allowance`] is not spent.
pub(crate) fn draw() {
    with_ancestors(|frames| {
        let lineage = Lineage::of_top(frames);
        if let Some(owner) = allowance_owner(lineage.clone()) {
            owner.spend();
        }
        if let Some(root) = lineage.last() {
            root.retries
                .store(root.retries().saturating_add(1), Relaxed);
        }
    });
}

/// Swaps the polled call's count of nested calls with `children`: each racer of a hedged call
/// numbers its own nested calls, so that every racer derives the same ids for the same call.
pub(crate) fn swap_children(children: &mut u32) {
    with_ancestors(|mut frames| {
        if let Some(top) = frames.next() {
            *children = top.children.swap(*children, Relaxed);
        }
    });
}

/// The polled call's gates learn: what its body tells [`hear`] is kept, for [`heard`] to take
/// before the poll ends. A nested call is deeper in the chain: its body's reports are its
/// own. What a body that panicked left at this depth is forgotten.
pub(crate) fn listen() {
    with_ancestors(|mut frames| {
        if let Some(top) = frames.next() {
            top.listening.store(true, Relaxed);
        }
    });
    heard();
}

/// What the polled call's body reported during this poll, and when.
#[inline(never)]
pub(crate) fn heard() -> Option<(ProviderLimits, Instant)> {
    let depth = with_ancestors(|frames| frames.count());
    // Polled from a thread-local's destructor, once `HEARD` is gone: nothing was kept.
    HEARD
        .try_with(|heard| heard.borrow_mut().get_mut(depth)?.take())
        .ok()
        .flatten()
}

/// Keeps what the polled call's body reports of the provider's limits, if its gates learn.
pub(crate) fn hear(limits: ProviderLimits) {
    let depth = with_ancestors(|mut frames| {
        let top = frames.next()?;
        top.listening.load(Relaxed).then(|| frames.count() + 1)
    });
    if let Some(depth) = depth {
        // From a thread-local's destructor, once `HEARD` is gone, the report is not kept.
        let _ = HEARD.try_with(|heard| {
            let mut heard = heard.borrow_mut();
            if heard.len() <= depth {
                heard.resize(depth + 1, None);
            }
            // A reset counts from when it was said, not from when the call ends.
            heard[depth] = Some((limits, Instant::now()));
        });
    }
}

/// The breaker the polled call now goes through (its address; 0: none): a route's next
/// target's, chosen while its frame is published.
pub(crate) fn set_breaker(breaker: usize) {
    with_ancestors(|mut frames| {
        if let Some(top) = frames.next() {
            top.breaker.store(breaker, Relaxed);
        }
    });
}

/// Runs `listener` (hearing an event of the polled call, if one is polled) so that the calls
/// it makes are operations of their own: it still sees the polled call's operation, but its
/// calls take no number among those the call's body starts, and nothing of its allowance.
pub(crate) fn observed<R>(listener: impl FnOnce() -> R) -> R {
    /// Puts the flag back when the listener returns or unwinds.
    struct Restore<'a>(&'a Frame, bool);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.observed.store(self.1, Relaxed);
        }
    }
    with_ancestors(|mut frames| match frames.next() {
        Some(top) => {
            let _restore = Restore(top, top.observed.swap(true, Relaxed));
            listener()
        }
        None => listener(),
    })
}

/// The id of the polled call.
pub(crate) fn current_id() -> Option<OperationId> {
    with_ancestors(|mut frames| frames.next().map(Frame::id))
}

/// Whether `breaker` is held by a call of the polled call's operation enclosing it: then the
/// polled call goes through as part of it.
pub(crate) fn held_by_ancestor(breaker: usize) -> bool {
    with_ancestors(|frames| {
        Lineage::of_top(frames)
            .skip(1)
            .any(|frame| frame.breaker.load(Relaxed) == breaker)
    })
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
    /// The call's frame, nested in the innermost published one if there is one: made at the
    /// call's first poll, where the chain shows the calls around it. One struct written at
    /// the end, so that it is made where the poll keeps it rather than moved there.
    #[inline(always)]
    pub(crate) fn frame(self) -> Frame {
        let (parent, has_owner) = with_ancestors(|mut frames| {
            // A listener's call is not part of the call it hears.
            let parent = frames
                .next()
                .filter(|parent| !parent.observed.load(Relaxed));
            // The parent looked at first: most calls are outermost, and a walk of the chain
            // from its top costs every call 13 instructions more (benches/instructions).
            let has_owner = parent.is_some_and(|parent| {
                parent.left().is_some()
                    || allowance_owner(Lineage::around(parent, frames)).is_some()
            });
            let parent = parent.map(|parent| {
                let n = parent.children.load(Relaxed).saturating_add(1);
                parent.children.store(n, Relaxed);
                (parent.sequence(), parent.path.child(n), parent.deadline)
            });
            (parent, has_owner)
        });
        let owns = self.retry > 0 && (self.independent || !has_owner);
        let (nested, sequence, path, deadline) = match parent {
            Some((sequence, path, deadline)) => {
                (true, sequence, path, earliest(deadline, self.deadline))
            }
            None => (false, 0, Path::ROOT, self.deadline),
        };
        Frame {
            sequence: AtomicU64::new(sequence),
            nested,
            path,
            children: AtomicU32::new(0),
            deadline,
            allowance: AtomicU64::new(if owns {
                u64::from(self.retry)
            } else {
                NO_ALLOWANCE
            }),
            retries: AtomicU32::new(0),
            breaker: AtomicUsize::new(self.breaker),
            owner: if owns { self.name.cloned() } else { None },
            listening: AtomicBool::new(false),
            observed: AtomicBool::new(false),
        }
    }
}
