//! A shared gate's share of its rate while its store is down: each instance's local gate runs
//! at the declared rate divided by the instances the store last saw using it, so that together
//! they keep about the declared rate instead of sending it once each.

use super::RateGate;

impl RateGate {
    /// [`RateGate::allowed`] for a gate that runs at `1 / share` of its rate, with its burst
    /// divided too (at least one).
    #[inline]
    pub(super) fn allowed_at_share(&self, from: u64, cost: u64, share: u64) -> u64 {
        if self.auto {
            // No burst: each call passes when the schedule reaches it.
            return from;
        }
        let interval = self.interval.saturating_mul(share);
        let credit = interval.saturating_mul((self.burst / share).max(1));
        from.saturating_add(interval.saturating_mul(cost))
            .saturating_sub(credit)
    }

    /// How far past now the schedule runs (ns), if the gate granted slots alone since its
    /// store last took them (0 otherwise): what its next reservation in the store charges
    /// first, so that the store's schedule counts them.
    #[cfg(feature = "shared")]
    pub(crate) fn ahead_alone(&self) -> u64 {
        match self.shared.as_ref().is_some_and(|link| link.take_alone()) {
            true => (self.tat.load(std::sync::atomic::Ordering::Acquire))
                .saturating_sub(self.offset(tokio::time::Instant::now())),
            false => 0,
        }
    }

    /// The part of its rate the gate may take when it decides alone: all of it, except for a
    /// shared gate while its store is down, which takes its instance's share (see
    /// [`GateLink::share`](crate::seams::GateLink::share)), never below one unit per period:
    /// a store counting more instances than the rate has units (or answering `u64::MAX`,
    /// whose interval saturated and let every call through) leaves one.
    #[inline]
    pub(super) fn share_now(&self) -> u64 {
        #[cfg(feature = "shared")]
        if let Some(link) = &self.shared {
            return link.share().clamp(1, self.count.max(1));
        }
        1
    }
}
