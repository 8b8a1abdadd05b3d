//! The one seam everything observable passes through: attempts, waits, rejections and
//! breaker transitions. Tracing and metrics attach here without touching the policies.
//!
//! With no listener set, emitting an event costs one atomic load.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::breaker::Transition;
use crate::operation::OperationId;
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
        /// The attempt that failed last.
        attempt: u32,
        /// Why no retry was made.
        reason: GiveUp,
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
    /// A setting was ignored because of a conflict (a named breaker configured differently
    /// at two sites).
    ConfigConflict {
        /// The policy's name.
        site: &'a str,
        /// What conflicts, and what to do.
        message: &'a str,
    },
}

/// Why an operation made no further retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// The policy declares no retries (`retry = 0`).
    NoRetries,
    /// The policy's own `retry` count is used up.
    RetriesExhausted,
    /// The operation's retry allowance, owned by an outer layer, is used up.
    AllowanceSpent,
    /// The retry budget across operations is used up.
    BudgetExhausted,
    /// The next wait would end past the deadline.
    DeadlineTooClose,
    /// The error asked to wait longer than `retry_after_max`: the caller decides whether to.
    RetryAfterTooLong,
    /// The breaker opened meanwhile: the operation ends with the provider's last error.
    BreakerOpen,
    /// The rate gate has no slot before the deadline: the operation ends with the provider's
    /// last error.
    RateLimited,
}

impl GiveUp {
    /// A short name for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            GiveUp::NoRetries => "no retries declared",
            GiveUp::RetriesExhausted => "retries exhausted",
            GiveUp::AllowanceSpent => "operation's retry allowance spent",
            GiveUp::BudgetExhausted => "retry budget exhausted",
            GiveUp::DeadlineTooClose => "no time left before the deadline",
            GiveUp::RetryAfterTooLong => "asked to wait longer than retry_after_max",
            GiveUp::BreakerOpen => "the breaker opened",
            GiveUp::RateLimited => "no rate slot before the deadline",
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome<'a> {
    /// The provider answered with success.
    Ok,
    /// A permanent error: not retried.
    Permanent,
    /// A transient error: may be retried.
    Transient,
    /// The runtime cut or refused the attempt.
    Rejected(&'a Rejected),
}

/// Receives [`Event`]s. Keep it fast: it runs inline on the calling task.
///
/// ```
/// use resil_runtime::events::{Event, Listener};
/// use resil_runtime::Policy;
/// use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
///
/// #[derive(Debug, Default)]
/// struct CountAttempts(AtomicU32);
///
/// impl Listener for CountAttempts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::AttemptStarted { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let counter = Arc::new(CountAttempts::default());
/// let policy = Policy::builder().listener(counter.clone()).build().unwrap();
/// let _: Result<(), resil_runtime::Rejected> = policy.run(|| async { Ok(()) }).await;
/// assert_eq!(counter.0.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub trait Listener: Send + Sync + fmt::Debug + 'static {
    /// Called for every event.
    fn on_event(&self, event: &Event<'_>);
}

static GLOBAL: OnceLock<Arc<dyn Listener>> = OnceLock::new();

/// Sets the listener for every policy that has none of its own (including every
/// `#[resilient]` function). Only the first call takes effect; later ones return the
/// listener back.
pub fn set_global_listener(listener: Arc<dyn Listener>) -> Result<(), Arc<dyn Listener>> {
    GLOBAL.set(listener)
}

/// The listener a policy emits to: its own, or else the global one.
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

pub(crate) fn resolve(own: Option<&Arc<dyn Listener>>) -> Option<&Arc<dyn Listener>> {
    own.or_else(|| GLOBAL.get())
}

/// Tells `listener`, with feature `tracing` the tracing subscriber (a WARN event with
/// `breaker`, `key`, `from`, `to`), and with feature `metrics` the breaker's gauge, that a
/// breaker changed state.
pub(crate) fn breaker_transition(
    listener: Option<&std::sync::Arc<dyn Listener>>,
    breaker: &crate::Breaker,
    transition: crate::breaker::Transition,
) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        breaker = breaker.label(),
        key = breaker.key().unwrap_or_default(),
        from = %transition.from,
        to = %transition.to,
        "circuit breaker changed state"
    );
    #[cfg(feature = "metrics")]
    crate::meter::breaker_state(breaker, transition);
    if let Some(listener) = listener {
        listener.on_event(&Event::BreakerTransition {
            breaker: breaker.name(),
            transition,
        });
    }
}
