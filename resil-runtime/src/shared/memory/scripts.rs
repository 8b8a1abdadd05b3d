//! The in-memory store's `RESERVE` (GCRA, with the heartbeats that count a gate's instances)
//! and `WINDOW` (a shared breaker's window summed over the instances): what Redis's scripts
//! decide, on tokio's clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Hub, InMemory};
use crate::seams::{
    whole_micros, BreakerLink, Reservation, Reserved, Slot, WindowBatch, WindowSums,
};
use crate::sync::lock_std;

impl InMemory {
    /// RESERVE: GCRA over the gates at once, all or none.
    pub(super) fn reserve_now(&self, reservation: &Reservation) -> Reserved {
        let now = self.hub.now();
        let mut state = lock_std(&self.hub.state);
        state.sweep(now);
        // A heartbeat counts its user whether the reservation is granted or refused.
        let mut users = [0; 2];
        for (ask, users) in reservation.asks().zip(&mut users) {
            if let Some(seen_for) = ask.heartbeat() {
                state.beats += 1;
                let user = (self.instance, ask.user());
                *users = beat(&mut state.seen, &ask.gate().key, user, now, seen_for);
            }
        }
        let mut longest = 0;
        let mut slots = Vec::with_capacity(2);
        for ask in reservation.asks() {
            let (interval, tolerance) =
                (whole_micros(ask.interval()), whole_micros(ask.tolerance()));
            let key = ask.gate().name();
            let (tat, epoch) = state
                .gates
                .get(key)
                .map_or((None, 0), |kept| (kept.tat, kept.epoch));
            // The slots the instance's local gate granted alone come first; the slot's start
            // stays the schedule's (past the calls made alone), so that giving it back takes
            // back the charge of those still waiting.
            let from = match whole_micros(ask.alone_used()) {
                0 => tat.unwrap_or(now),
                used => tat.unwrap_or(now).max(now.saturating_add(used)),
            };
            let start = match whole_micros(ask.alone()) {
                0 => from,
                alone => from.max(now.saturating_add(alone)),
            };
            let next = start
                .max(now)
                .saturating_add(interval.saturating_mul(ask.cost()));
            let wait = next.saturating_sub(tolerance).saturating_sub(now);
            let limit = reservation.limit().map(whole_micros);
            if limit.is_some_and(|limit| wait > limit) {
                return Reserved::refused(Duration::from_micros(wait)).with_instances(users);
            }
            longest = longest.max(wait);
            let ahead = Duration::from_micros(next - now);
            slots.push(Slot::new(from, next, epoch, ahead));
        }
        for ((ask, slot), users) in reservation.asks().zip(&mut slots).zip(users) {
            let key = &ask.gate().key;
            state.gates.entry(Arc::clone(key)).or_default().tat = Some(slot.end());
            *slot = slot.with_instances(users);
        }
        Reserved::granted(Duration::from_micros(longest), slots)
    }
}

impl Hub {
    /// Batches added to shared windows so far (a Redis store's round trips for them).
    #[cfg(test)]
    pub(super) fn batches(&self) -> u64 {
        lock_std(&self.state).batches
    }

    /// Heartbeats heard so far (a Redis store's writes for them).
    #[cfg(test)]
    pub(super) fn beats(&self) -> u64 {
        lock_std(&self.state).beats
    }

    /// WINDOW: adds a batch to the bucket of now, forgets the buckets the window has passed,
    /// and answers the sums.
    pub(super) fn add_to_window(&self, breaker: &BreakerLink, batch: WindowBatch) -> WindowSums {
        let head = self.now() / whole_micros(batch.width()).max(1);
        let oldest = (head + 1).saturating_sub(batch.buckets());
        let mut state = lock_std(&self.state);
        state.sweep(self.now());
        state.batches += 1;
        let span = whole_micros(batch.width()).saturating_mul(batch.buckets());
        let (until, buckets) = state.windows.entry(Arc::clone(&breaker.id)).or_default();
        *until = self.now().saturating_add(span);
        let bucket = buckets.entry(head).or_default();
        bucket.0 = bucket.0.saturating_add(batch.calls());
        bucket.1 = bucket.1.saturating_add(batch.bad());
        buckets.retain(|n, _| *n >= oldest);
        let (calls, bad) = buckets.values().fold((0u64, 0u64), |(calls, bad), bucket| {
            (calls.saturating_add(bucket.0), bad.saturating_add(bucket.1))
        });
        WindowSums::new(calls, bad)
    }
}

/// A heartbeat of `user` (an instance's user of the gate) for the gate `key` at `now` (µs):
/// the users heard within `seen_for`, this one included.
fn beat(
    seen: &mut HashMap<Arc<str>, HashMap<(usize, u64), u64>>,
    key: &Arc<str>,
    user: (usize, u64),
    now: u64,
    seen_for: Duration,
) -> u64 {
    let users = seen.entry(Arc::clone(key)).or_default();
    users.insert(user, now.saturating_add(whole_micros(seen_for)));
    users.retain(|_, until| *until >= now);
    users.len() as u64
}
