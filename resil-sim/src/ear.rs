//! What an instance's policies tell their listeners, kept with the instant it was told: the
//! world drains it into the checker at every step, which holds it against what happened.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resil_runtime::events::{AttemptOutcome, Event, Listener};
use resil_runtime::Priority;
use tokio::time::Instant;

/// One event, as the checks need it.
#[derive(Debug)]
pub(crate) enum Heard {
    /// A breaker's transition: the breaker, from, to.
    Transition(String, String, String),
    /// An attempt about to call: its operation's id and its number.
    Started(String, u32),
    /// An attempt ended: its operation's id, its number and its outcome.
    Ended(String, u32, &'static str),
    /// The next attempt of an operation goes to this target.
    Routed(String, String),
    /// A route passed over this target, refused so.
    Skipped(String, String, &'static str),
    /// A retry or a hedge of an operation, as the trace says it: drawn from the policy's
    /// retry budget once the operation called.
    Drew(Option<String>, String),
    Line(String),
    /// A wait in turn served: its operation, what it waited for, its class, how long since
    /// it joined the waiting room, and whether aging promoted it.
    Served(Option<String>, &'static str, Priority, Duration, bool),
    /// The listener panics on an event of this operation: what the event announced does
    /// not happen.
    Panics(String),
}

/// Who heard an event: the instance, and its policy (0 outer, 1 inner).
pub(crate) type Who = (usize, u8);

/// What the listeners of a world heard: per event, who and when.
pub(crate) type Heards = Arc<Mutex<Vec<(Who, Instant, Heard)>>>;

/// How a world's listeners panic: on every n-th attempt start or wait each hears, while the
/// switch is on (off for the liveness probe at the end).
pub(crate) type Panics = Option<(u32, Arc<AtomicBool>)>;

/// What a listener's panic says: a panic that reaches a caller with another message is not
/// the body's or a listener's own.
pub(crate) const LISTENER_PANIC: &str = "sim: a listener panics";

/// The listener of one of an instance's policies.
#[derive(Debug)]
pub(crate) struct Ear {
    pub(crate) instance: usize,
    pub(crate) which: u8,
    pub(crate) heard: Heards,
    pub(crate) panics: Panics,
    pub(crate) counted: AtomicU32,
}

fn outcome(outcome: &AttemptOutcome<'_>) -> &'static str {
    match outcome {
        AttemptOutcome::Ok => "ok",
        AttemptOutcome::Permanent => "permanent",
        AttemptOutcome::Transient => "transient",
        AttemptOutcome::Throttled => "throttled",
        AttemptOutcome::Rejected(rejected) => rejected.kind(),
        AttemptOutcome::Cancelled => "cancelled",
        _ => "other",
    }
}

impl Listener for Ear {
    fn on_event(&self, event: &Event<'_>) {
        // Only where a caller polls: a panic in a drop would abort the process.
        let panics = match event {
            Event::AttemptStarted { operation, .. } | Event::Waiting { operation, .. } => {
                Some(operation.map(|id| id.to_string()))
            }
            _ => None,
        };
        let heard = match event {
            Event::BreakerTransition {
                breaker,
                transition,
            } => Heard::Transition(
                (*breaker).to_owned(),
                transition.from.to_string(),
                transition.to.to_string(),
            ),
            Event::Skipped {
                operation: Some(operation),
                target,
                rejected,
                ..
            } => Heard::Skipped(operation.to_string(), (*target).to_owned(), rejected.kind()),
            Event::Routed {
                operation: Some(operation),
                target,
                ..
            } => Heard::Routed(operation.to_string(), (*target).to_owned()),
            Event::Hedged {
                operation, attempt, ..
            } => Heard::Drew(
                operation.map(|id| id.to_string()),
                format!("hedge {attempt}"),
            ),
            Event::AttemptStarted {
                operation: Some(operation),
                attempt,
                ..
            } => Heard::Started(operation.to_string(), *attempt),
            Event::AttemptEnded {
                operation: Some(operation),
                attempt,
                outcome: ended,
                ..
            } => Heard::Ended(operation.to_string(), *attempt, outcome(ended)),
            Event::Waiting {
                operation, wait, ..
            } => Heard::Drew(
                operation.map(|id| id.to_string()),
                format!("waits {wait:?}"),
            ),
            Event::Served {
                operation,
                wait,
                class,
                waited,
                promoted,
                ..
            } => Heard::Served(
                operation.map(|id| id.to_string()),
                wait,
                *class,
                *waited,
                *promoted,
            ),
            Event::GaveUp { reason, asked, .. } => {
                Heard::Line(format!("gave up: {} (asked {asked:?})", reason.as_str()))
            }
            Event::Rejected { rejected, .. } => Heard::Line(format!("rejected: {rejected}")),
            Event::RateLearnt { from, to, .. } => {
                Heard::Line(format!("rate learnt {from:.3}/s -> {to:.3}/s"))
            }
            Event::GateShare { instances, .. } => {
                Heard::Line(format!("gate share: {instances} instances"))
            }
            _ => return,
        };
        let mut sink = self
            .heard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let who = (self.instance, self.which);
        sink.push((who, Instant::now(), heard));
        if let (Some((every, on)), Some(operation)) = (&self.panics, panics) {
            let count = self.counted.fetch_add(1, Ordering::Relaxed) + 1;
            if on.load(Ordering::Relaxed) && count % every == 0 {
                if let Some(operation) = operation {
                    sink.push((who, Instant::now(), Heard::Panics(operation)));
                }
                drop(sink);
                panic!("{LISTENER_PANIC}");
            }
        }
    }
}
