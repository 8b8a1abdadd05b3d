//! The one seam everything observable passes through: attempts, waits, rejections and
//! breaker transitions. Tracing and metrics attach here without touching the policies.
//!
//! With no listener set, emitting an event costs one atomic load.

use crate::breaker_state::Transition;

mod event;
mod listeners;
mod outcomes;

pub use event::{Event, Override};
pub use listeners::{add_global_listener, add_listener_for, Listener};
pub(crate) use listeners::{resolve, Both};
pub use outcomes::{AttemptOutcome, GiveUp};

/// Tells `listener`, with feature `tracing` the tracing subscriber (a WARN event with
/// `breaker`, `key`, `from`, `to`), and with feature `metrics` the breaker's gauge, that a
/// breaker changed state.
pub(crate) fn breaker_transition(
    listener: Option<&std::sync::Arc<dyn Listener>>,
    breaker: BreakerName<'_>,
    transition: Transition,
) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        breaker = breaker.label,
        key = breaker.key.unwrap_or_default(),
        from = %transition.from,
        to = %transition.to,
        "circuit breaker changed state"
    );
    #[cfg(feature = "metrics")]
    crate::meter::breaker_state(breaker.label, breaker.key, transition);
    if let Some(listener) = listener {
        listener.on_event(&Event::BreakerTransition {
            breaker: breaker.name,
            transition,
        });
    }
}

/// How a breaker is named where it is reported: its full name (`label=key` for a keyed one),
/// its label and its key.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(
        dead_code,
        reason = "label and key label only tracing's events and metrics' series"
    )
)]
pub(crate) struct BreakerName<'a> {
    pub(crate) name: &'a str,
    pub(crate) label: &'a str,
    pub(crate) key: Option<&'a str>,
}

/// Tells the global listeners, with feature `tracing` the subscriber (WARN when lost, INFO
/// when back) and with feature `metrics` the gauge `resil_shared_available{store}`, that a
/// Redis store stopped answering (`reason`) or answers again (`None`).
#[cfg(feature = "redis")]
pub(crate) fn shared_store(store: &str, reason: Option<&str>) {
    #[cfg(feature = "tracing")]
    match reason {
        Some(reason) => tracing::warn!(store, reason, "shared store unavailable: deciding locally"),
        None => tracing::info!(store, "shared store available again: re-synced"),
    }
    #[cfg(feature = "metrics")]
    metrics::gauge!(crate::series::SHARED_AVAILABLE.name, "store" => store.to_owned())
        .set(if reason.is_none() { 1.0 } else { 0.0 });
    if let Some(listener) = resolve(None) {
        listener.on_event(&match reason {
            Some(reason) => Event::SharedUnavailable { store, reason },
            None => Event::SharedRestored { store },
        });
    }
}

/// A shared gate decides alone at its share of the rate (see [`Event::GateShare`]).
#[cfg(feature = "shared")]
pub(crate) fn gate_share(gate: &str, instances: u64) {
    #[cfg(feature = "tracing")]
    tracing::warn!(
        gate,
        instances,
        "shared store unavailable: the gate decides alone at its share of the rate"
    );
    if let Some(listener) = resolve(None) {
        listener.on_event(&Event::GateShare { gate, instances });
    }
}
