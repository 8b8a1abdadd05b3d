//! The links a shared breaker and a shared gate hold to their store: plain data, a name in the
//! store, the policy's patience with it, and what this instance still has to tell it.
//!
//! A breaker is named `resil:{breaker:NAME}` and a gate `resil:{gate:FN}:rate` or
//! `…:tokens` (`resil:{gate:FN:LABEL=KEY}:…` for a gate per key), by `keys.rs`, the one place
//! names are made.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::keys::{breaker_id, gate_key};
use super::news::{Announcement, Change, GateNews};
use super::{Probe, ProbeAnswer, SharedStore, Unavailable, MAX_MICROS};
use crate::breaker_state::{BreakerState, Transition};

/// How a policy shares its state: where, what to do when the store does not answer, and who
/// hears of what peers make of its breakers.
#[derive(Clone)]
pub(crate) struct Sharing {
    pub(crate) store: Arc<dyn SharedStore>,
    pub(crate) timeout: Duration,
    pub(crate) fail_closed: bool,
    /// Reports a transition no call of this instance made (a peer's, or an opening judged
    /// from a shared window's sums): set by the policy, which knows the listeners.
    pub(crate) heard: fn(&dyn Linked, Transition),
}

impl fmt::Debug for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharing")
            .field("timeout", &self.timeout)
            .field("fail_closed", &self.fail_closed)
            .finish_non_exhaustive()
    }
}

impl Sharing {
    /// The store's answer, if it gives one within `shared_timeout`; a store that errs or is
    /// late leaves the decision to the local state, and hears that it was late.
    pub(crate) async fn bounded<T>(
        &self,
        answer: impl Future<Output = Result<T, Unavailable>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(answer) => answer.ok(),
            Err(_) => {
                self.store.timed_out();
                None
            }
        }
    }
}

/// What the seam asks of a shared breaker, which implements it: the seam, below the breaker,
/// never names it, and a store's news reaches the breaker through it.
pub(crate) trait Linked: Send + Sync {
    /// Its link, once tied to a store.
    fn link(&self) -> Option<&BreakerLink>;
    /// Its state now.
    fn state_now(&self) -> BreakerState;
    /// What is left of its cooldown now (zero unless open).
    fn cooldown_left(&self) -> Duration;
    /// A peer opened, `left` of its cooldown still: the transition made here, if any.
    fn open_as_peer(&self, left: Duration) -> Option<Transition>;
    /// A peer's probe closed it: the transition made here, if any.
    fn close_as_peer(&self) -> Option<Transition>;
    /// Its name, label and key, as events name a breaker.
    fn names(&self) -> (&str, &str, Option<&str>);
}

/// A shared breaker's place in its store, as the store sees it: its name there and the
/// policy's patience. Made by resil when a policy is built; a store reads it.
///
/// ```
/// use resil_runtime::shared::BreakerLink;
///
/// fn key(breaker: &BreakerLink) -> String {
///     format!("{}:open", breaker.name())
/// }
/// ```
pub struct BreakerLink {
    /// The policy's, shared by all its links (one per key, for a keyed policy).
    pub(crate) sharing: Arc<Sharing>,
    pub(crate) id: Arc<str>,
    /// A transition made here that the store has not heard of (it was down or slow), told at
    /// the next re-sync if the breaker is still in that state.
    pub(crate) pending: Arc<Pending>,
}

impl fmt::Debug for BreakerLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerLink")
            .field("name", &self.id)
            .field("timeout", &self.sharing.timeout)
            .finish_non_exhaustive()
    }
}

impl BreakerLink {
    /// The link of the breaker named `name` in the store, for a policy sharing as `sharing`.
    pub(crate) fn new(sharing: &Arc<Sharing>, name: &str) -> Self {
        BreakerLink {
            sharing: Arc::clone(sharing),
            id: Arc::from(breaker_id(name)),
            pending: Arc::default(),
        }
    }

    /// The breaker's name in the store, `resil:{breaker:NAME}`: the same in every instance,
    /// and different for every shared breaker. Redis keeps its opening at this name followed
    /// by `:open` and its probe's lock by `:probe`; the part in braces, a Redis Cluster hash
    /// tag, puts both on one node.
    pub fn name(&self) -> &str {
        &self.id
    }

    /// How long resil waits for the store's answer about this breaker (the policy's
    /// `shared_timeout`): a store bounds what it sends in the background by it too.
    pub fn timeout(&self) -> Duration {
        self.sharing.timeout
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    /// The breaker reached `to` by its own calls: the store is told now if it is usable, and
    /// at the next re-sync otherwise.
    pub(crate) fn announce(&self, breaker: &dyn Linked, to: BreakerState) {
        let Some(change) = Change::of(breaker, to) else {
            return;
        };
        let announcement = Announcement::new(self, change);
        if self.sharing.store.usable() {
            self.sharing.store.announce(announcement);
        }
    }

    pub(crate) async fn acquire_probe(&self, limit: Duration) -> ProbeAnswer {
        if !self.sharing.store.usable() {
            return ProbeAnswer::Unavailable;
        }
        let answer = self.sharing.store.acquire_probe(self, limit);
        match self.sharing.bounded(answer).await {
            Some(Probe::Granted) => ProbeAnswer::Granted,
            Some(Probe::Elsewhere(retry_in)) => ProbeAnswer::Peer(retry_in),
            None => ProbeAnswer::Unavailable,
        }
    }

    pub(crate) fn release_probe(&self) {
        if self.sharing.store.usable() {
            self.sharing.store.release_probe(self);
        }
    }

    /// Reports a transition a peer caused.
    pub(crate) fn heard(&self, breaker: &dyn Linked, transition: Option<Transition>) {
        if let Some(transition) = transition {
            (self.sharing.heard)(breaker, transition);
        }
    }
}

/// A transition made here that the store has not heard of yet: [`Pending::OPENED`] or
/// [`Pending::CLOSED`] in the low bits (0 when none), under a count of announcements above
/// them. A reply clears only the announcement it answers: an opening's reply arriving after a
/// closing (or a later opening) was announced leaves that one pending.
#[derive(Debug, Default)]
pub(crate) struct Pending(AtomicU64);

impl Pending {
    pub(crate) const OPENED: u64 = 1;
    pub(crate) const CLOSED: u64 = 2;
    pub(crate) const STATE: u64 = 3;

    /// Records a transition to tell; returns what to hand [`Pending::published`] once the
    /// store has heard of it.
    pub(crate) fn announce(&self, state: u64) -> u64 {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let next = ((current & !Self::STATE).wrapping_add(Self::STATE + 1)) | state;
            match (self.0).compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next,
                Err(now) => current = now,
            }
        }
    }

    /// The announcement pending now, if any.
    pub(crate) fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// The transition still to tell the store, if the breaker is still in the state it
    /// reached (`state`, its state now), with what to hand [`Pending::published`] once told.
    pub(crate) fn untold(&self, state: BreakerState) -> (Option<BreakerState>, u64) {
        let pending = self.now();
        let untold = match (pending & Self::STATE, state) {
            (Self::OPENED, BreakerState::Open) => Some(BreakerState::Open),
            (Self::CLOSED, BreakerState::Closed) => Some(BreakerState::Closed),
            _ => None,
        };
        (untold, pending)
    }

    /// The store heard of `announced`: nothing is pending, unless another was announced
    /// meanwhile.
    pub(crate) fn published(&self, announced: u64) {
        let _ = (self.0).compare_exchange(
            announced,
            announced & !Self::STATE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// A shared rate gate's place in its store, as the store sees it: its name there, the
/// schedule it keeps (GCRA: slots [`interval`](Self::interval) apart,
/// [`burst`](Self::burst) of them at once) and the policy's patience. Made by resil when a
/// policy (or a key of a keyed policy) is built; a store reads it.
///
/// ```
/// use resil_runtime::shared::GateLink;
/// use std::time::Duration;
///
/// fn describe(gate: &GateLink) -> String {
///     let per_second = Duration::from_secs(1).as_micros() / gate.interval().as_micros();
///     format!("{}: {per_second}/s, {} at once", gate.name(), gate.burst())
/// }
/// ```
#[derive(Debug)]
pub struct GateLink {
    /// The policy's, shared by all its links.
    pub(crate) sharing: Arc<Sharing>,
    /// The function's name, as written (shared by the links of its keys).
    function: Arc<str>,
    /// Its key, [`gate_key`].
    pub(crate) key: Arc<str>,
    /// The declared interval between units, in µs.
    pub(crate) interval: u64,
    pub(crate) burst: u64,
    /// Throttles that other instances saw (each revokes the slots this instance waits for).
    holds: AtomicU64,
    /// Times the store answered again after an outage (each revokes the slots this instance's
    /// gate promised alone, meanwhile).
    returns: AtomicU64,
    /// The instances the store last said use the gate (0: it never said): while the store is
    /// down, this instance's local gate runs at its share of the rate.
    pub(super) seen: AtomicU32,
    /// When this instance last told the store it uses the gate, in ns from `created` (0:
    /// never).
    pub(super) beat_at: AtomicU64,
    pub(super) created: tokio::time::Instant,
    /// The outage (`returns` + 1) whose share was last told to the listeners.
    pub(super) told: AtomicU32,
    /// This link's number in the process: the store counts each link (each policy's gate)
    /// among the gate's users, so two policies of one instance sharing it count twice.
    pub(super) user: u64,
    /// What the link keeps for the store while it is down or late, made when first needed
    /// and let go when empty: a key's link keeps a pointer.
    pub(super) apart: std::sync::Mutex<Option<Box<Apart>>>,
}

/// What a link keeps for its store while it is down or late.
#[derive(Debug, Default)]
pub(super) struct Apart {
    /// The slots the local gate granted alone (the store down or silent) that its callers
    /// still hold, `(end, used)`: every reservation charges them to the store's schedule
    /// first (see `alone.rs`).
    pub(super) alone: Vec<(u64, bool)>,
    /// Slots given back while the store was down, to give back once it answers: their epoch,
    /// and their stretches `(from, end)` (see `owed.rs`).
    pub(super) owed: (u64, Vec<(u64, u64)>),
}

impl Apart {
    fn is_empty(&self) -> bool {
        self.alone.is_empty() && self.owed.1.is_empty()
    }
}

impl GateLink {
    /// What the link keeps apart, made if `make`, let go once empty after `f`.
    pub(super) fn apart<T>(&self, make: bool, f: impl FnOnce(&mut Apart) -> T) -> Option<T> {
        let mut apart = crate::sync::lock_std(&self.apart);
        if make && apart.is_none() {
            *apart = Some(Box::default());
        }
        let kept = apart.as_deref_mut()?;
        let answer = f(kept);
        if kept.is_empty() {
            *apart = None;
        }
        Some(answer)
    }
}

impl GateLink {
    /// The link of the gate `what` (`rate` or `tokens`) of the function `name` (see
    /// [`gate_key`]) whose slots are `interval` apart (nanoseconds, as the local gate's),
    /// `burst` of them at once.
    pub(crate) fn new(
        sharing: &Arc<Sharing>,
        what: &'static str,
        name: &str,
        interval: u64,
        burst: u64,
    ) -> Arc<Self> {
        let key = gate_key(what, name);
        Self::listed(sharing, Arc::from(name), key, micros(interval), burst)
    }

    /// The same gate for the key `key` of a keyed policy whose keys are `label`:
    /// `resil:{gate:FN:LABEL=KEY}:…` (of the function's link, not of a key's).
    pub(crate) fn for_key(&self, label: &str, key: &str) -> Arc<Self> {
        // `rate` or `tokens`: what follows the hash tag in the function's own key, which
        // `gate_key` wrote (a name inside the tag has no `}`), rather than a field in every
        // key's link.
        let what = self.key.rsplit_once("}:").map_or("", |(_, what)| what);
        let key = gate_key(what, &format!("{}:{label}={key}", self.function));
        Self::listed(
            &self.sharing,
            Arc::clone(&self.function),
            key,
            self.interval,
            self.burst,
        )
    }

    /// A link the store lists, so that other instances' throttles reach it.
    fn listed(
        sharing: &Arc<Sharing>,
        function: Arc<str>,
        key: String,
        interval: u64,
        burst: u64,
    ) -> Arc<Self> {
        let link = Arc::new(GateLink {
            sharing: Arc::clone(sharing),
            key: Arc::from(key),
            function,
            interval,
            burst,
            holds: AtomicU64::new(0),
            returns: AtomicU64::new(0),
            seen: AtomicU32::new(0),
            beat_at: AtomicU64::new(0),
            created: tokio::time::Instant::now(),
            told: AtomicU32::new(0),
            user: next_user(),
            apart: std::sync::Mutex::new(None),
        });
        sharing.store.listen_gate(GateNews::new(&link));
        link
    }

    /// The gate's name in the store: `resil:{gate:FN}:rate` or `resil:{gate:FN}:tokens`
    /// (`resil:{gate:FN:LABEL=KEY}:…` for a gate per key), the same in every instance. A
    /// function's two gates share the part in braces, a Redis Cluster hash tag, so that a
    /// reservation of both touches one node.
    pub fn name(&self) -> &str {
        &self.key
    }

    /// The declared interval between two units, in whole µs (at least 1).
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval)
    }

    /// How many units may go at once.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The burst's credit: `interval × burst`, how far a schedule may run ahead of now.
    pub fn credit(&self) -> Duration {
        Duration::from_micros(self.credit_micros())
    }

    /// How long resil waits for the store's answer about this gate (the policy's
    /// `shared_timeout`): a store bounds what it sends in the background by it too.
    pub fn timeout(&self) -> Duration {
        self.sharing.timeout
    }

    /// The burst's credit, in µs.
    pub(crate) fn credit_micros(&self) -> u64 {
        self.interval.saturating_mul(self.burst).min(MAX_MICROS)
    }

    /// What the store's schedule takes for `cost` units at the local gate's `interval` now
    /// (ns): the interval and the tolerance in µs. The slot is `tolerance` before the
    /// schedule's new end, so a slowed unit takes the longer interval out of the schedule and
    /// starts when it would have (see `RateGate::slow_down`).
    pub(crate) fn schedule(&self, cost: u64, interval: u64) -> (u64, u64) {
        let interval = micros(interval).max(self.interval);
        let slower = (interval - self.interval).saturating_mul(cost.min(MAX_MICROS));
        (
            interval,
            self.credit_micros().saturating_add(slower).min(MAX_MICROS),
        )
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    /// Whether to ask the store at all (see [`SharedStore::usable`]).
    pub(crate) fn is_available(&self) -> bool {
        self.sharing.store.usable()
    }

    /// Throttles other instances saw: part of the local gate's epoch.
    pub(crate) fn holds(&self) -> u64 {
        self.holds.load(Ordering::Acquire)
    }

    /// Another instance was throttled: the slots this instance waits for are revoked (they
    /// take new ones from the store, after the wait).
    pub(crate) fn revoke_waiting(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// Times the store answered again after an outage, so far.
    pub(crate) fn returns(&self) -> u64 {
        self.returns.load(Ordering::Acquire)
    }

    /// The store answers again after an outage: the slots the local gate promised alone
    /// meanwhile are revoked (they would run beside the store's schedule, which does not count
    /// them, and are taken again from it); those the store granted stand.
    pub(crate) fn store_returned(&self) {
        self.returns.fetch_add(1, Ordering::AcqRel);
        // What was given back meanwhile goes back now, not at this instance's next
        // reservation: the other instances would wait for its callers who gave up.
        self.pay_owed();
    }

    pub(crate) fn hold(&self, wait: Duration) {
        if self.sharing.store.usable() {
            self.sharing.store.hold(self, wait);
        }
    }
}

/// Nanoseconds in whole µs, rounded up (a slot is never closer than the local gate's).
pub(crate) fn micros(nanos: u64) -> u64 {
    nanos.div_ceil(1000).clamp(1, MAX_MICROS)
}

/// A number for each gate link of the process, never the same twice.
fn next_user() -> u64 {
    static USERS: AtomicU64 = AtomicU64::new(0);
    USERS.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_clears_only_the_announcement_it_answers() {
        let pending = Pending::default();
        let opened = pending.announce(Pending::OPENED);
        let closed = pending.announce(Pending::CLOSED);
        pending.published(opened);
        assert_eq!(
            pending.now() & Pending::STATE,
            Pending::CLOSED,
            "the closing is still to publish"
        );
        let reopened = pending.announce(Pending::OPENED);
        pending.published(closed);
        assert_eq!(
            pending.now(),
            reopened,
            "open, closed, open: the last opening stays"
        );
        pending.published(reopened);
        assert_eq!(pending.now() & Pending::STATE, 0, "nothing pending");
    }
}
