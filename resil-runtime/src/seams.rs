//! Feature `redis`: what a breaker and a rate gate need from a store that many instances of a
//! service share, as one trait, [`SharedStore`], that the primitives hold and the execution
//! calls, and that the layers above implement (Redis in `crate::shared`). The links here are
//! plain data: a breaker's or a gate's name in the store, the policy's patience with it, and
//! what this instance still has to tell it.
//!
//! A store names a breaker `resil:{breaker:NAME}` and a gate `resil:{gate:FN}:rate` or
//! `…:tokens` (`resil:{gate:FN:LABEL=KEY}:…` for a gate per key): see [`breaker_id`] and
//! [`gate_key`], the one place keys are named. Peers' news reaches the breakers and gates it
//! lists.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{Breaker, BreakerState};
use crate::Rejected;

/// A future a store hands back: boxed, since it is a trait's, and rare (a probe, or a shared
/// gate's slot, which is a round trip anyway).
pub(crate) type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store shared by many instances: where shared breakers announce their transitions and
/// take the half-open probe's lock, and where shared gates reserve, refund and hold slots.
/// Nothing here waits longer than the policy's `shared_timeout`; an answer that does not come
/// in time is `Unavailable`, and the local state decides.
pub(crate) trait SharedStore: Send + Sync {
    /// Whether to ask the store at all now: not while it is known to be down (the local state
    /// then decides at once, with no wait for a timeout).
    fn usable(&self) -> bool;
    /// Lists a shared breaker, so that what peers publish about it reaches it.
    fn register_breaker(&self, link: &BreakerLink, breaker: &Arc<Breaker>);
    /// Lists a shared gate, so that other instances' throttles reach it.
    fn register_gate(&self, gate: &Arc<GateLink>);
    /// The local breaker reached `to` by its own calls: tell the store and the peers, in the
    /// background (no call waits on it); what the store does not hear of is told at the next
    /// re-sync (see [`Pending`]).
    fn announce(&self, link: &BreakerLink, breaker: &Breaker, to: BreakerState);
    /// Whether this instance sends the half-open probe, which holds the lock for `limit` at
    /// most.
    fn acquire_probe<'a>(
        &'a self,
        link: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, ProbeAnswer>;
    /// The probe ended with no verdict: another instance may probe at once.
    fn release_probe(&self, link: &BreakerLink);
    /// Reserves an attempt's slots in the shared gates (the rate gate's and the token gate's,
    /// each with its cost and the interval its local gate runs at now) at once: both or
    /// neither. `limit` is the longest wait the deadline allows.
    fn reserve(
        self: Arc<Self>,
        gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
        limit: Option<Duration>,
    ) -> StoreFuture<'static, SharedSlots>;
    /// Gives `slot` back, reserved but not used (only while it is the latest promised and no
    /// throttle revoked it).
    fn refund(&self, gate: &GateLink, slot: RemoteSlot);
    /// A provider throttled a call: every instance's gate holds its slots for `wait`, and the
    /// slots they promised are revoked.
    fn hold(&self, gate: &GateLink, wait: Duration);
}

/// How a policy shares its state: where, and what to do when the store does not answer.
#[derive(Clone)]
pub(crate) struct Sharing {
    pub(crate) store: Arc<dyn SharedStore>,
    pub(crate) timeout: Duration,
    pub(crate) fail_closed: bool,
}

impl fmt::Debug for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sharing")
            .field("timeout", &self.timeout)
            .field("fail_closed", &self.fail_closed)
            .finish_non_exhaustive()
    }
}

/// What the store said about the half-open probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// This instance probes.
    Granted,
    /// A peer's opening or probe is in force for this long: reject meanwhile.
    Peer(Duration),
    /// The store did not answer in time.
    Unavailable,
}

/// A breaker's id in the store, `resil:{breaker:NAME}`: its keys are the id and a suffix
/// (`:open`, `:probe`), all in one Redis Cluster hash slot (the part in braces), so one script
/// touches one node; different breakers spread over the nodes.
pub(crate) fn breaker_id(name: &str) -> String {
    format!("resil:{{breaker:{}}}", tag_safe(name))
}

/// A gate's key in the store, `resil:{gate:FN}:rate` or `resil:{gate:FN}:tokens` (`what`):
/// the rate and the token gate of one function (or of one key of it) share the hash tag, so
/// the script reserving both at once runs on one Redis Cluster node.
pub(crate) fn gate_key(what: &str, name: &str) -> String {
    format!("resil:{{gate:{}}}:{what}", tag_safe(name))
}

/// A name as it may stand inside a hash tag: `%`, `{` and `}` percent-encoded, so that no
/// name ends or splits the tag, and two names stay two keys (the encoding is injective).
pub(crate) fn tag_safe(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['%', '{', '}']) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut safe = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => safe.push_str("%25"),
            '{' => safe.push_str("%7B"),
            '}' => safe.push_str("%7D"),
            c => safe.push(c),
        }
    }
    std::borrow::Cow::Owned(safe)
}

/// A breaker's place in the store, [`breaker_id`].
pub(crate) struct BreakerLink {
    pub(crate) sharing: Sharing,
    pub(crate) id: Arc<str>,
    /// A transition made here that the store has not heard of (it was down or slow), told at
    /// the next re-sync if the breaker is still in that state.
    pub(crate) pending: Arc<Pending>,
}

impl BreakerLink {
    /// Ties `breaker` (named `name` in the store) to it, unless it is tied already (a named
    /// breaker used by several shared policies keeps its first tie).
    pub(crate) fn bind(sharing: &Sharing, name: &str, breaker: &Arc<Breaker>) {
        let link = BreakerLink {
            sharing: sharing.clone(),
            id: Arc::from(breaker_id(name)),
            pending: Arc::default(),
        };
        if let Some(link) = breaker.share(link) {
            sharing.store.register_breaker(link, breaker);
        }
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    pub(crate) fn announce(&self, breaker: &Breaker, to: BreakerState) {
        self.sharing.store.announce(self, breaker, to);
    }

    pub(crate) async fn acquire_probe(&self, limit: Duration) -> ProbeAnswer {
        self.sharing.store.acquire_probe(self, limit).await
    }

    pub(crate) fn release_probe(&self) {
        self.sharing.store.release_probe(self);
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

/// The largest number of µs handed to a store: far from where Lua's doubles lose units.
pub(crate) const MAX_MICROS: u64 = 1 << 50;

/// A rate gate's place in the store: its name, and the schedule it keeps there (GCRA: slots
/// `interval` µs apart, `burst` of them at once).
#[derive(Debug)]
pub(crate) struct GateLink {
    pub(crate) sharing: Sharing,
    /// `rate` or `tokens`.
    what: &'static str,
    /// The function's name, as written (shared by the links of its keys).
    name: Arc<str>,
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
}

impl GateLink {
    /// The link of the gate `what` (`rate` or `tokens`) of the function `name` (see
    /// [`gate_key`]) whose slots are `interval` apart (nanoseconds, as the local gate's),
    /// `burst` of them at once.
    pub(crate) fn new(
        sharing: &Sharing,
        what: &'static str,
        name: &str,
        interval: u64,
        burst: u64,
    ) -> Arc<Self> {
        let key = gate_key(what, name);
        Self::listed(sharing, what, Arc::from(name), key, micros(interval), burst)
    }

    /// The same gate for the key `key` of a keyed policy whose keys are `label`:
    /// `resil:{gate:FN:LABEL=KEY}:…` (of the function's link, not of a key's).
    pub(crate) fn for_key(&self, label: &str, key: &str) -> Arc<Self> {
        let key = gate_key(self.what, &format!("{}:{label}={key}", self.name));
        let name = Arc::clone(&self.name);
        Self::listed(
            &self.sharing,
            self.what,
            name,
            key,
            self.interval,
            self.burst,
        )
    }

    /// A link the store lists, so that other instances' throttles reach it.
    fn listed(
        sharing: &Sharing,
        what: &'static str,
        name: Arc<str>,
        key: String,
        interval: u64,
        burst: u64,
    ) -> Arc<Self> {
        let link = Arc::new(GateLink {
            sharing: sharing.clone(),
            what,
            key: Arc::from(key),
            name,
            interval,
            burst,
            holds: AtomicU64::new(0),
            returns: AtomicU64::new(0),
        });
        sharing.store.register_gate(&link);
        link
    }

    /// The burst's credit, in µs.
    pub(crate) fn credit(&self) -> u64 {
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
            self.credit().saturating_add(slower).min(MAX_MICROS),
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
    }

    pub(crate) fn refund(&self, slot: RemoteSlot) {
        self.sharing.store.refund(self, slot);
    }

    pub(crate) fn hold(&self, wait: Duration) {
        self.sharing.store.hold(self, wait);
    }
}

/// A duration in whole µs as a store takes it: saturating, and at most [`MAX_MICROS`].
pub(crate) fn whole_micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_MICROS)
}

/// Nanoseconds in whole µs, rounded up (a slot is never closer than the local gate's).
pub(crate) fn micros(nanos: u64) -> u64 {
    nanos.div_ceil(1000).clamp(1, MAX_MICROS)
}

/// Reserves an attempt's slots in its shared gates, through their store (both gates of a
/// policy share one).
pub(crate) fn reserve(
    gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
    limit: Option<Duration>,
) -> StoreFuture<'static, SharedSlots> {
    match gates.iter().flatten().next() {
        Some((first, ..)) => Arc::clone(&first.sharing.store).reserve(gates, limit),
        None => Box::pin(std::future::ready(SharedSlots::Granted(Granted {
            wait: Duration::ZERO,
            slots: [None, None],
        }))),
    }
}

/// What the shared gates said about an attempt.
#[derive(Debug)]
pub(crate) enum SharedSlots {
    /// Reserved in the store.
    Granted(Granted),
    /// The store's gate would make the attempt wait past its deadline: nothing reserved.
    Refused(Rejected),
    /// The store did not answer in time: the local gates decide (or, failing closed, refuse).
    Unavailable,
}

/// Slots the store reserved: the wait until the later of them, and each gate's (the rate
/// gate's, then the token gate's).
#[derive(Debug)]
pub(crate) struct Granted {
    pub(crate) wait: Duration,
    pub(crate) slots: RemoteSlots,
}

/// The slots of an attempt in the shared gates: the rate gate's, then the token gate's.
pub(crate) type RemoteSlots = [Option<RemoteSlot>; 2];

/// A slot the store promised: the gate's schedule before and after it (µs on the store's
/// clock), its throttle count then, and how far past now the schedule runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteSlot {
    pub(crate) from: u64,
    pub(crate) end: u64,
    pub(crate) epoch: u64,
    pub(crate) ahead: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_end_or_split_the_hash_tag() {
        assert_eq!(breaker_id("openai"), "resil:{breaker:openai}");
        assert_eq!(
            gate_key("rate", "llm::complete"),
            "resil:{gate:llm::complete}:rate"
        );
        assert_eq!(breaker_id("a}b"), "resil:{breaker:a%7Db}");
        let names = ["a}b", "a", "{x}", "%7Bx%7D", "%", "%25", "}", "{"];
        let keys: std::collections::HashSet<_> =
            names.iter().map(|name| gate_key("rate", name)).collect();
        assert_eq!(keys.len(), names.len(), "two names, two keys: {keys:?}");
        for key in &keys {
            let tag = &key[key.find('{').unwrap() + 1..];
            assert!(!tag[..tag.find('}').unwrap()].contains('{'), "{key}");
            assert!(
                key.ends_with("}:rate"),
                "the tag ends where resil ends it: {key}"
            );
        }
    }

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
