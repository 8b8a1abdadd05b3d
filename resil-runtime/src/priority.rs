//! [`Priority`]: how urgent a call is when it must wait for a gate's slot or a bulkhead's
//! place, and [`Turns`], the order in which such waiters are served.

use std::collections::VecDeque;
use std::task::Waker;

/// How urgent a call is, for a policy that orders its waiters (`priority = ARG`, or
/// [`Execution::set_priority`](crate::Execution::set_priority)): when a call must wait for a
/// rate gate's slot or a place in a bulkhead's queue, the next slot or place goes to the most
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

    /// The classes, most urgent first.
    const ALL: [Priority; 3] = [Priority::Critical, Priority::Default, Priority::Batch];

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

/// The callers waiting for a gate's slot or a bulkhead's place, in the order they are served:
/// by class, first come first served within one, with aging (see [`Priority::AGING_PASSES`]).
/// It only orders: the gate or the bulkhead decides when the next one is served, and each
/// waiter's wait leaves it (served, or dropped) so that none leaves a hole.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    classes: [VecDeque<Waiter>; 3],
    /// Per class, the turns given to a more urgent class since this one last was served, while
    /// it had waiters.
    passed: [u32; 3],
    next_id: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    waker: Option<Waker>,
}

impl Turns {
    /// A new waiter of `class`, last of its class: its number. The waiter it displaces as
    /// next, if any, is woken to stop waiting for the next slot or place.
    pub(crate) fn join(&mut self, class: Priority) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let displaced = self.next_class();
        self.classes[class.index()].push_back(Waiter { id, waker: None });
        if let Some(displaced) = displaced.filter(|_| self.next() == Some(id)) {
            let waker = self.classes[displaced]
                .front_mut()
                .and_then(|w| w.waker.take());
            if let Some(waker) = waker {
                waker.wake();
            }
        }
        id
    }

    /// The class served next: a class passed over [`Priority::AGING_PASSES`] times (the most
    /// urgent of those), otherwise the most urgent that waits.
    fn next_class(&self) -> Option<usize> {
        let waiting = |class: &usize| !self.classes[*class].is_empty();
        let aged = (0..3)
            .filter(waiting)
            .find(|class| self.passed[*class] >= Priority::AGING_PASSES);
        aged.or_else(|| (0..3).find(waiting))
    }

    /// The waiter served next.
    pub(crate) fn next(&self) -> Option<u64> {
        let class = self.next_class()?;
        self.classes[class].front().map(|waiter| waiter.id)
    }

    /// Serves the next waiter (`id`, as [`Turns::next`] said): it leaves, the classes it passed
    /// count one more pass, and the next waiter, if any, is woken to take its place.
    pub(crate) fn serve(&mut self, id: u64) {
        let Some(class) = self.next_class() else {
            return;
        };
        debug_assert_eq!(self.classes[class].front().map(|w| w.id), Some(id));
        self.classes[class].pop_front();
        self.passed[class] = 0;
        for other in class + 1..3 {
            if !self.classes[other].is_empty() {
                self.passed[other] = self.passed[other].saturating_add(1);
            }
        }
        self.wake_next();
    }

    /// A waiter gives up (its caller dropped the wait): it leaves without a trace; if it was
    /// next, the new next is woken. Whether it was still waiting.
    pub(crate) fn leave(&mut self, id: u64) -> bool {
        let next = self.next();
        for (class, waiters) in self.classes.iter_mut().enumerate() {
            if let Some(at) = waiters.iter().position(|waiter| waiter.id == id) {
                waiters.remove(at);
                if waiters.is_empty() {
                    self.passed[class] = 0;
                }
                if next == Some(id) {
                    self.wake_next();
                }
                return true;
            }
        }
        false
    }

    /// Keeps `waker` to wake waiter `id` when its turn may have come.
    pub(crate) fn wait(&mut self, id: u64, waker: &Waker) {
        let waiter = self
            .classes
            .iter_mut()
            .flat_map(|waiters| waiters.iter_mut())
            .find(|waiter| waiter.id == id);
        if let Some(waiter) = waiter {
            match &mut waiter.waker {
                Some(kept) if kept.will_wake(waker) => {}
                kept => *kept = Some(waker.clone()),
            }
        }
    }

    /// Wakes the waiter served next, to take (or wait for) the next slot or place.
    pub(crate) fn wake_next(&mut self) {
        if let Some(class) = self.next_class() {
            if let Some(waker) = self.classes[class].front_mut().and_then(|w| w.waker.take()) {
                waker.wake();
            }
        }
    }

    /// How many waiters would be served before a newcomer of `class`, ignoring aging: those
    /// of its class and the more urgent ones.
    pub(crate) fn ahead_of(&self, class: Priority) -> usize {
        Priority::ALL[..=class.index()]
            .iter()
            .map(|class| self.classes[class.index()].len())
            .sum()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.classes.iter().all(VecDeque::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_the_most_urgent_first_and_in_arrival_order_within_a_class() {
        let mut turns = Turns::default();
        let batch = turns.join(Priority::Batch);
        let default = turns.join(Priority::Default);
        let critical = turns.join(Priority::Critical);
        let second_critical = turns.join(Priority::Critical);
        for expected in [critical, second_critical, default, batch] {
            assert_eq!(turns.next(), Some(expected));
            turns.serve(expected);
        }
        assert!(turns.is_empty());
    }

    #[test]
    fn a_class_passed_over_aging_passes_times_is_served_next() {
        let mut turns = Turns::default();
        let batch = turns.join(Priority::Batch);
        let mut served = 0;
        loop {
            let critical = turns.join(Priority::Critical);
            let next = turns.next().unwrap();
            turns.serve(next);
            if next == batch {
                break;
            }
            assert_eq!(next, critical);
            served += 1;
        }
        assert_eq!(served, Priority::AGING_PASSES);
    }

    #[test]
    fn a_waiter_that_leaves_leaves_no_trace() {
        let mut turns = Turns::default();
        let first = turns.join(Priority::Batch);
        let second = turns.join(Priority::Batch);
        assert!(turns.leave(first));
        assert_eq!(turns.next(), Some(second));
        assert!(!turns.leave(first));
        assert_eq!(turns.ahead_of(Priority::Batch), 1);
        assert_eq!(turns.ahead_of(Priority::Critical), 0);
    }
}
