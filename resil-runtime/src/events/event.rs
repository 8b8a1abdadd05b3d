//! [`Event`]: what a policy did, as its listeners hear it.

use std::fmt;
use std::time::Duration;

use super::outcomes::{AttemptOutcome, GiveUp};
use crate::breaker_state::Transition;
use crate::operation_id::OperationId;
use crate::priority::Priority;
use crate::Rejected;

/// Something a policy did.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An attempt is about to call the provider.
    AttemptStarted {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name (the annotated function's path, for `#[resilient]`).
        site: &'a str,
        /// 0 for the first attempt.
        attempt: u32,
    },
    /// An attempt ended.
    AttemptEnded {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// 0 for the first attempt.
        attempt: u32,
        /// How it ended.
        outcome: AttemptOutcome<'a>,
        /// From the call's start to its end: a wait before it for another call's breaker
        /// probe verdict is not counted (it still counts toward the attempt's timeout).
        elapsed: Duration,
    },
    /// The policy is waiting before the next attempt.
    Waiting {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt that failed.
        attempt: u32,
        /// How long.
        wait: Duration,
    },
    /// The operation was rejected by the runtime (bulkhead, breaker, deadline).
    Rejected {
        /// The logical operation (see [`crate::Operation`]).
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// Why.
        rejected: &'a Rejected,
    },
    /// The operation ended on a transient failure although the error was worth retrying.
    GaveUp {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt that failed last; for a hedged operation, the last attempt drawn.
        attempt: u32,
        /// Why no retry was made.
        reason: GiveUp,
        /// The wait the last error asked for (its `retry_after()`), if it asked: with
        /// [`GiveUp::RetryAfterTooLong`] or [`GiveUp::DeadlineTooClose`], the wait refused.
        asked: Option<Duration>,
    },
    /// A routed operation (`route = model in [...]`) sends its next attempt to `target`.
    Routed {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The attempt about to start (0 for the first).
        attempt: u32,
        /// The target's name: the routed key's value.
        target: &'a str,
        /// Whether the attempt is a hedge, racing attempts still in flight.
        hedge: bool,
    },
    /// A hedge started: one more attempt beside those in flight, which keep running.
    Hedged {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The hedge's attempt number.
        attempt: u32,
    },
    /// A routed operation passed over `target` without calling it: its breaker is open (or
    /// its probe is out), its gate has no slot within the deadline, or its bulkhead is full.
    Skipped {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// The target's name.
        target: &'a str,
        /// What the target would have answered.
        rejected: &'a Rejected,
    },
    /// A call of a policy that orders its waiters (`priority`, `fair`) waited in turn for a
    /// gate's slot or a place in the bulkhead's queue, and was served. (A call that needed
    /// no wait hears none.)
    Served {
        /// The logical operation.
        operation: Option<&'a OperationId>,
        /// The policy's name.
        site: &'a str,
        /// What it waited for: `"rate"` (the rate gate's slot), `"token_rate"` (the token
        /// gate's units) or `"bulkhead"` (a place).
        wait: &'static str,
        /// Its class.
        class: Priority,
        /// From joining the waiting room to being served.
        waited: Duration,
        /// Served by aging, before a more urgent waiter (see [`Priority::AGING_PASSES`]).
        promoted: bool,
    },
    /// A gate that learns from the provider's answers (`rate = "auto"`) changed its rate by
    /// more than a tenth.
    RateLearnt {
        /// The policy's name.
        site: &'a str,
        /// The key whose gate it is, for a gate per key.
        key: Option<&'a str>,
        /// `"rate"` (requests) or `"token_rate"` (tokens).
        gate: &'static str,
        /// Units per second before (0: nothing learnt yet).
        from: f64,
        /// Units per second now.
        to: f64,
    },
    /// An adaptive bulkhead's limit moved by more than a tenth since it was last reported.
    ConcurrencyLimit {
        /// The policy's name.
        site: &'a str,
        /// The key, for a bulkhead per key.
        key: Option<&'a str>,
        /// The limit last reported (or its start).
        from: usize,
        /// The limit now.
        to: usize,
    },
    /// A breaker changed state.
    BreakerTransition {
        /// The breaker's name.
        breaker: &'a str,
        /// From which state to which.
        transition: Transition,
    },
    /// An operator forced a breaker open or reset it ([`crate::Breaker::force_open`],
    /// [`crate::Breaker::reset`]).
    BreakerOverridden {
        /// The breaker's name.
        breaker: &'a str,
        /// What the operator did.
        action: Override,
    },
    /// A configuration was refused as a whole (see [`crate::config`]): every policy keeps its
    /// tuning.
    ConfigRefused {
        /// What was read: a file, the environment.
        origin: &'a str,
        /// Every problem, one a line, each with where it is and the fix.
        message: &'a str,
    },
    /// A configuration changed this policy's tuning; new operations start with it.
    Reconfigured {
        /// The policy's name.
        site: &'a str,
    },
    /// The Redis store of shared policies stopped answering (unreachable, or slower than a
    /// policy's `shared_timeout`): until [`Event::SharedRestored`], every instance decides
    /// locally (or refuses, for a policy that fails closed). Heard once per outage.
    SharedUnavailable {
        /// The store's URL, its password hidden.
        store: &'a str,
        /// What went wrong first.
        reason: &'a str,
    },
    /// The Redis store answers again; shared breakers were re-synced with it.
    SharedRestored {
        /// The store's URL, its password hidden.
        store: &'a str,
    },
    /// While its store does not answer, a shared rate gate decides alone at its share of the
    /// rate: the declared rate and burst divided by the users the store last saw (each
    /// policy's gate of that name, in each instance; the burst at least 1), so that together
    /// they keep about the declared rate. Heard once per outage and gate, when it first
    /// decides alone; not heard by a gate that saw no other user.
    GateShare {
        /// The gate's name in the store (`resil:{gate:FN}:rate`, `resil:{gate:FN}:tokens`).
        gate: &'a str,
        /// The users the store last saw (each policy's gate of this name, in each instance),
        /// this one included.
        instances: u64,
    },
    /// A setting was ignored because of a conflict (a named breaker configured differently
    /// at two sites).
    ConfigConflict {
        /// The policy's name.
        site: &'a str,
        /// What conflicts, and what to do.
        message: &'a str,
    },
}

impl<'a> Event<'a> {
    /// The policy the event comes from, for the events that carry one (attempts, waits,
    /// rejections, give-ups, conflicts).
    pub fn site(&self) -> Option<&'a str> {
        match self {
            Event::AttemptStarted { site, .. }
            | Event::AttemptEnded { site, .. }
            | Event::Waiting { site, .. }
            | Event::Rejected { site, .. }
            | Event::GaveUp { site, .. }
            | Event::Routed { site, .. }
            | Event::Hedged { site, .. }
            | Event::Skipped { site, .. }
            | Event::Served { site, .. }
            | Event::RateLearnt { site, .. }
            | Event::ConcurrencyLimit { site, .. }
            | Event::ConfigConflict { site, .. }
            | Event::Reconfigured { site } => Some(site),
            Event::BreakerTransition { .. }
            | Event::BreakerOverridden { .. }
            | Event::ConfigRefused { .. }
            | Event::SharedUnavailable { .. }
            | Event::SharedRestored { .. }
            | Event::GateShare { .. } => None,
        }
    }
}

/// What an operator did to a breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Override {
    /// Opened it until reset.
    ForcedOpen,
    /// Closed it.
    Reset,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Override::ForcedOpen => "forced_open",
            Override::Reset => "reset",
        })
    }
}
