//! [`Priority`]: how urgent a call is when it must wait for a gate's slot or a bulkhead's
//! place, and [`Turns`], the order in which such waiters are served.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::OnceLock;

/// How urgent a call is, for a policy that orders its waiters (`priority = ARG`, or
/// [`Execution::set_priority`](crate::Execution::set_priority)): when a call must wait for a
/// gate's slot (a rate gate's, or a token gate's units) or a place in a bulkhead's queue, the
/// next slot or place goes to the most
/// urgent waiter, `Critical`, then `Default`, then `Batch`, first come first served within a
/// class. A call that needs no wait is not ordered: it goes at once, as without a priority.
///
/// A slot is given when it comes due, not booked at arrival: a critical call that arrives
/// behind 100 queued batch calls on a `10/s` gate takes the next slot (within one period), the
/// gate keeps its rate for all the calls together, and the batch calls lose only the slots
/// taken from them. No class starves: a class that waits while slots go to more urgent ones is
/// served after [`Priority::AGING_PASSES`] of them (aging), so under a steady critical flood a
/// batch call's wait is bounded (see the constant).
///
/// ```
/// use std::time::Duration;
/// use resil_runtime::{Next, Policy, Priority, Rejected};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// // What `#[resilient(rate = "10/s", priority = class)]` builds.
/// let policy = Policy::builder()
///     .rate(10, Duration::from_secs(1), 1)
///     .by_priority()
///     .build()
///     .unwrap();
/// let mut execution = policy.execute::<Rejected>();
/// execution.set_priority(Priority::Critical);
/// let Next::Done(outcome) = execution.attempt(async { Ok(5) }).await else {
///     unreachable!("no retry declared")
/// };
/// assert_eq!(outcome.into_result(), Ok(5));
/// assert_eq!(Priority::default(), Priority::Default);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Someone is waiting for the answer (an interactive request): served first.
    Critical,
    /// What is neither: served after critical calls.
    #[default]
    Default,
    /// Background work (summaries, evaluations, backfills): served last, and only after
    /// [`Priority::AGING_PASSES`] slots went to others while it waited.
    Batch,
}

impl Priority {
    /// The most slots (or bulkhead places) in a row that may go to more urgent calls while a
    /// class waits: the next goes to the first waiter of that class. So the first waiting
    /// batch call starts after at most `AGING_PASSES + 2` slots whatever more urgent calls
    /// arrive (the `+ 2`: one aged default call may go first, and the slot being given when it
    /// became first), at least one slot in `AGING_PASSES + 1` goes to a class that waits, and
    /// a priority orders calls without starving any.
    pub const AGING_PASSES: u32 = 8;

    fn index(self) -> usize {
        self as usize
    }

    /// The class's name, as labels show it: `critical`, `default`, `batch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Default => "default",
            Priority::Batch => "batch",
        }
    }
}

impl From<&Priority> for Priority {
    fn from(class: &Priority) -> Self {
        *class
    }
}

impl std::fmt::Display for Priority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call's turn when it must wait, as a request carries it to a policy that a layer applies:
/// its [`Priority`] and its `fair` value. The tower layer reads it from each request with
/// [`PolicyLayer::ordered_by`](crate::tower::PolicyLayer::ordered_by); the reqwest middleware
/// from the request's extensions (`RequestBuilder::with_extension(order)`, or a bare
/// [`Priority`] there); by hand, [`Execution::set_order`](crate::Execution::set_order).
///
/// ```
/// use resil_runtime::{Order, Priority};
///
/// let order = Order::new(Priority::Critical).fair("tenant-42");
/// assert_eq!(order.priority(), Priority::Critical);
/// assert_eq!(order, Order::new(Priority::Critical).fair("tenant-42"));
/// assert_ne!(order, Order::new(Priority::Critical).fair("tenant-7"));
/// assert_eq!(Order::default().priority(), Priority::Default);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Order {
    place: Place,
}

impl Order {
    /// A call of class `priority`, sharing its `fair` turn with the calls that give no value.
    pub fn new(priority: Priority) -> Self {
        let mut place = Place::default();
        place.set_class(priority);
        Order { place }
    }

    /// Its `fair` value: where the policy serves its waiters fairly, the waiters of one class
    /// take turns across these values (see
    /// [`Execution::set_fair_key`](crate::Execution::set_fair_key)).
    pub fn fair<V: Hash + ?Sized>(mut self, value: &V) -> Self {
        self.place.set_lane(lane(value));
        self
    }

    /// Its class.
    pub fn priority(&self) -> Priority {
        self.place.class()
    }

    pub(crate) fn place(self) -> Place {
        self.place
    }
}

/// The lane of a `fair` value: its hash, keyed once per process so that no caller can choose
/// values that share a lane.
pub(crate) fn lane<V: Hash + ?Sized>(value: &V) -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    KEYS.get_or_init(RandomState::new).hash_one(value)
}

/// Who waits for a slot or a place: its [`Priority`], and its lane, the `fair` value it
/// shares the wait with (hashed; see [`Execution::set_fair_key`](crate::Execution::set_fair_key)).
/// Every waiter of a policy that is not fair is in one lane.
///
/// One word, the class in its top two bits (`Default` as 0) and the lane in the others: every
/// call's admission holds one, so the default is a single zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Place(u64);

impl Place {
    const LANE: u64 = u64::MAX >> 2;
    /// The lane of the values that came when every lane was taken: no value's (a lane is 62
    /// bits).
    pub(super) const OVERFLOW: u64 = u64::MAX;

    #[cfg(test)]
    pub(crate) fn new(class: Priority, lane: u64) -> Self {
        let mut place = Place(0);
        place.set_class(class);
        place.set_lane(lane);
        place
    }

    pub(crate) fn class(self) -> Priority {
        match self.0 >> 62 {
            1 => Priority::Critical,
            2 => Priority::Batch,
            _ => Priority::Default,
        }
    }

    pub(crate) fn lane(self) -> u64 {
        self.0 & Self::LANE
    }

    pub(crate) fn set_class(&mut self, class: Priority) {
        let bits: u64 = match class {
            Priority::Default => 0,
            Priority::Critical => 1,
            Priority::Batch => 2,
        };
        self.0 = (bits << 62) | self.lane();
    }

    pub(crate) fn set_lane(&mut self, lane: u64) {
        self.0 = (self.0 & !Self::LANE) | (lane & Self::LANE);
    }
}

/// How a caller's wait in turn for a slot or a place ended: how long it waited, and whether
/// it was promoted (served by aging before a more urgent waiter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Served {
    pub(crate) waited: std::time::Duration,
    pub(crate) promoted: bool,
}

/// The waiting room of a gate or a bulkhead that orders its waiters (`R`: its [`Turns`] and
/// what it keeps beside them), made when a caller must wait and let go once nobody waits: a
/// key's gate or bulkhead keeps none between waits.
#[derive(Debug)]
pub(crate) struct Room<R> {
    lanes: usize,
    /// Its waiters' costs differ: their lanes take turns by units (see [`Turns::weighed`]).
    weighed: bool,
    room: std::sync::Mutex<Option<Box<R>>>,
}

/// What a [`Room`] keeps: whether it can be let go.
pub(crate) trait Idle {
    /// Nobody waits, nobody passed over is to come back, nothing is held for anyone.
    fn is_idle(&self) -> bool;
}

impl<R: Idle> Room<R> {
    /// A room whose waiters are served round-robin across up to `lanes` `fair` values (see
    /// [`Turns::new`]).
    pub(crate) fn new(lanes: usize) -> Self {
        Room {
            lanes,
            weighed: false,
            room: std::sync::Mutex::new(None),
        }
    }

    /// A room whose waiters' lanes take turns by the units they were served (see
    /// [`Turns::weighed`]).
    pub(crate) fn weighed(lanes: usize) -> Self {
        Room {
            weighed: true,
            ..Room::new(lanes)
        }
    }

    /// How many `fair` values it serves in turn, each in a lane of its own.
    #[cfg(feature = "shared")]
    pub(crate) fn lanes(&self) -> usize {
        self.lanes
    }

    /// A room alike, empty, for a key's gate or bulkhead.
    pub(crate) fn fresh(&self) -> Self {
        Room {
            weighed: self.weighed,
            ..Room::new(self.lanes)
        }
    }

    /// The room, made by `make` from new turns if nobody waits.
    pub(crate) fn lock(&self, make: impl FnOnce(Turns) -> R) -> Locked<'_, R> {
        let mut room = crate::sync::lock_std(&self.room);
        if room.is_none() {
            let turns = match self.weighed {
                true => Turns::weighed(self.lanes),
                false => Turns::new(self.lanes),
            };
            *room = Some(Box::new(make(turns)));
        }
        Locked(room)
    }

    /// The room, if somebody waits.
    pub(crate) fn made(&self) -> Option<Locked<'_, R>> {
        let room = crate::sync::lock_std(&self.room);
        room.is_some().then_some(Locked(room))
    }
}

/// A [`Room`], locked; let go when it is unlocked idle.
pub(crate) struct Locked<'a, R: Idle>(std::sync::MutexGuard<'a, Option<Box<R>>>);

impl<R: Idle> std::ops::Deref for Locked<'_, R> {
    type Target = R;

    fn deref(&self) -> &R {
        self.0.as_deref().expect("a locked room is made")
    }
}

impl<R: Idle> std::ops::DerefMut for Locked<'_, R> {
    fn deref_mut(&mut self) -> &mut R {
        self.0.as_deref_mut().expect("a locked room is made")
    }
}

impl<R: Idle> Drop for Locked<'_, R> {
    fn drop(&mut self) {
        if self.0.as_deref().is_some_and(Idle::is_idle) {
            *self.0 = None;
        }
    }
}

mod lanes;
mod turns;

pub(crate) use turns::Turns;
