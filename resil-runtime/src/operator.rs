//! What an operator does to a running process's breakers ([`Breaker::force_open`],
//! [`Breaker::reset`]): the breaker changes state, and the global listeners, tracing and
//! metrics hear of it.

use crate::breaker::{Breaker, Transition};
use crate::events;

impl Breaker {
    /// Opens the breaker and keeps it open, whatever its cooldown, until [`Breaker::reset`]:
    /// for a maintenance window, or a provider an operator knows is down. Calls fail at once
    /// with [`Rejected::BreakerOpen`](crate::Rejected::BreakerOpen) (`retry_in` is `Duration::MAX`: nobody knows when).
    /// A probe in flight counts for nothing; callers waiting for its verdict are refused. The
    /// global listener hears [`Event::BreakerOverridden`](crate::events::Event) and, if the
    /// state changed, the transition.
    ///
    /// ```
    /// use resil_runtime::{Breaker, BreakerConfig, BreakerState};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let breaker = Breaker::new("payments", BreakerConfig::default());
    /// breaker.force_open();
    /// tokio::time::advance(std::time::Duration::from_secs(3600)).await;
    /// assert!(breaker.admit().await.is_err(), "no probe while forced open");
    /// breaker.reset();
    /// assert_eq!(breaker.state(), BreakerState::Closed);
    /// assert!(breaker.admit().await.is_ok());
    /// # }
    /// ```
    pub fn force_open(&self) {
        overridden(self, events::Override::ForcedOpen, self.open_by_hand());
    }

    /// Closes the breaker with no failure counted, whatever its state (and lifts
    /// [`Breaker::force_open`]): for an operator who knows the provider is back. A probe in
    /// flight counts for nothing; callers waiting for its verdict go through.
    pub fn reset(&self) {
        overridden(self, events::Override::Reset, self.close_by_hand());
    }
}

fn overridden(breaker: &Breaker, action: events::Override, transition: Option<Transition>) {
    let listener = events::resolve(None);
    #[cfg(feature = "tracing")]
    tracing::warn!(breaker = breaker.label(), key = breaker.key().unwrap_or_default(), action = %action, "circuit breaker overridden by an operator");
    if let Some(listener) = listener {
        listener.on_event(&events::Event::BreakerOverridden {
            breaker: breaker.name(),
            action,
        });
    }
    if let Some(transition) = transition {
        events::breaker_transition(listener, breaker.into(), transition);
    }
}
