//! [`BreakerLink`]: what ties a local breaker to its state in Redis, and the messages
//! instances exchange about it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use super::scripts::{CLOSE, OPEN, PROBE, RELEASE};
use super::Sharing;
use crate::breaker::{Breaker, BreakerState, Transition};
use crate::events;

/// A transition made here that Redis has not heard of yet: `OPENED` or `CLOSED` in the low
/// bits (0 when none), under a count of announcements above them. A reply clears only the announcement it
/// answers: an opening's reply arriving after a closing (or a later opening) was announced
/// leaves that one pending.
#[derive(Debug, Default)]
pub(crate) struct Pending(AtomicU64);

const OPENED: u64 = 1;
const CLOSED: u64 = 2;
const STATE: u64 = 3;

impl Pending {
    /// Records a transition to publish; returns what to hand [`Pending::published`] once
    /// Redis has heard of it.
    pub(crate) fn announce(&self, state: u64) -> u64 {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let next = ((current & !STATE).wrapping_add(STATE + 1)) | state;
            match (self.0).compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return next,
                Err(now) => current = now,
            }
        }
    }

    /// The announcement pending now, if any.
    fn now(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Redis heard of `announced`: nothing is pending, unless another was announced meanwhile.
    pub(crate) fn published(&self, announced: u64) {
        let _ = (self.0).compare_exchange(
            announced,
            announced & !STATE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }
}

/// A breaker's place in Redis: `resil:breaker:{name}`, with `:open` (present while open,
/// expiring with the cooldown) and `:probe` (the half-open probe's lock).
pub(crate) struct BreakerLink {
    sharing: Sharing,
    id: Arc<str>,
    open_key: String,
    probe_key: String,
    /// A transition made here that Redis has not heard of (it was down or slow), published at
    /// the next re-sync if the breaker is still in that state.
    pending: Arc<Pending>,
}

/// What Redis said about the half-open probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeAnswer {
    /// This instance probes.
    Granted,
    /// A peer's opening or probe is in force for this long: reject meanwhile.
    Peer(Duration),
    /// Redis did not answer in time.
    Unavailable,
}

impl BreakerLink {
    /// Ties `breaker` (named `name` in Redis) to the store, unless it is tied already (a named
    /// breaker used by several shared policies keeps its first tie).
    pub(crate) fn bind(sharing: &Sharing, name: &str, breaker: &Arc<Breaker>) {
        let id: Arc<str> = Arc::from(format!("resil:breaker:{name}"));
        let link = BreakerLink {
            sharing: sharing.clone(),
            open_key: format!("{id}:open"),
            probe_key: format!("{id}:probe"),
            id: Arc::clone(&id),
            pending: Arc::default(),
        };
        if breaker.share(link) {
            sharing.store.register(&id, breaker);
        }
    }

    pub(crate) fn open_key(&self) -> &str {
        &self.open_key
    }

    pub(crate) fn fail_closed(&self) -> bool {
        self.sharing.fail_closed
    }

    /// The script that publishes a transition Redis did not hear of, if the breaker is still
    /// in the state it reached, with what to hand [`BreakerLink::published`] once it ran.
    pub(crate) fn pending(&self, breaker: &Breaker) -> Option<(ScriptInvocation<'static>, u64)> {
        let pending = self.pending.now();
        let invocation = match (pending & STATE, breaker.state()) {
            (OPENED, BreakerState::Open) => self.opening(breaker),
            (CLOSED, BreakerState::Closed) => Some(self.closing()),
            _ => None,
        };
        if invocation.is_none() {
            self.published(pending);
        }
        invocation.map(|invocation| (invocation, pending))
    }

    /// Redis heard of the transition `pending` (unless a newer one is pending meanwhile).
    pub(crate) fn published(&self, pending: u64) {
        self.pending.published(pending);
    }

    /// The local breaker changed state: tell Redis and the peers, in the background (no call
    /// waits on it). A transition Redis does not hear of is published at the next re-sync.
    pub(crate) fn announce(&self, breaker: &Breaker, to: BreakerState) {
        let (invocation, pending) = match to {
            BreakerState::Open => (self.opening(breaker), OPENED),
            BreakerState::Closed => (Some(self.closing()), CLOSED),
            BreakerState::HalfOpen => return,
        };
        let Some(invocation) = invocation else { return };
        let announced = self.pending.announce(pending);
        self.sharing.store.spawn_eval(
            self.sharing.timeout,
            invocation,
            Some((Arc::clone(&self.pending), announced)),
        );
    }

    /// The script that records the closing and tells the peers.
    fn closing(&self) -> ScriptInvocation<'static> {
        let message = Message::format("closed", self.sharing.store.instance(), 0, &self.id);
        let mut invocation = CLOSE.key(&self.open_key);
        invocation
            .key(&self.probe_key)
            .arg(message)
            .arg(self.sharing.store.instance());
        invocation
    }

    /// The script that records the breaker's opening, for what is left of its cooldown.
    fn opening(&self, breaker: &Breaker) -> Option<ScriptInvocation<'static>> {
        let left = breaker.retry_in(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let millis = millis(left);
        let message = Message::format("open", self.sharing.store.instance(), millis, &self.id);
        let mut invocation = OPEN.key(&self.open_key);
        invocation
            .key(&self.probe_key)
            .arg(millis)
            .arg(message)
            .arg(self.sharing.store.instance());
        Some(invocation)
    }

    /// Asks Redis whether this instance sends the half-open probe, which holds the lock for
    /// `limit` at most.
    pub(crate) async fn acquire_probe(&self, limit: Duration) -> ProbeAnswer {
        let mut invocation = PROBE.key(&self.open_key);
        invocation
            .key(&self.probe_key)
            .arg(self.sharing.store.instance())
            .arg(millis(limit));
        match self
            .sharing
            .store
            .eval::<u64>(self.sharing.timeout, &invocation)
            .await
        {
            Some(0) => ProbeAnswer::Granted,
            Some(wait) => ProbeAnswer::Peer(Duration::from_millis(wait)),
            None => ProbeAnswer::Unavailable,
        }
    }

    /// The probe ended with no verdict: another instance may probe at once.
    pub(crate) fn release_probe(&self) {
        let mut invocation = RELEASE.key(&self.probe_key);
        invocation.arg(self.sharing.store.instance());
        self.sharing
            .store
            .spawn_eval(self.sharing.timeout, invocation, None);
    }
}

/// Milliseconds, at least 1 (Redis refuses an expiry of 0) and within what Redis accepts.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, 1 << 46)
}

/// What one instance publishes: `open|{instance}|{ms left}|{breaker}`,
/// `closed|{instance}|0|{breaker}`, or `hold|{instance}|{µs}|{gate}` for a throttle that holds
/// a shared gate. The name comes last, as it may hold `|`.
pub(crate) struct Message<'a> {
    pub(crate) news: News,
    pub(crate) instance: &'a str,
    pub(crate) id: &'a str,
}

/// What a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum News {
    /// A breaker opened, for this long still.
    Open(Duration),
    /// A breaker closed.
    Closed,
    /// A gate is held for this long: the slots promised meanwhile are revoked.
    Held(Duration),
}

impl<'a> Message<'a> {
    fn format(state: &str, instance: &str, amount: u64, id: &str) -> String {
        format!("{state}|{instance}|{amount}|{id}")
    }

    /// What a throttle holding the gate `id` for `micros` publishes.
    pub(crate) fn held(instance: &str, micros: u64, id: &str) -> String {
        Self::format("hold", instance, micros, id)
    }

    /// A message as published; anything else (a stranger on the channel) is ignored.
    pub(crate) fn parse(payload: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?;
        let mut parts = text.splitn(4, '|');
        let state = parts.next()?;
        let instance = parts.next()?;
        let amount: u64 = parts.next()?.parse().ok()?;
        let id = parts.next()?;
        let news = match state {
            "open" => News::Open(Duration::from_millis(amount)),
            "closed" => News::Closed,
            "hold" => News::Held(Duration::from_micros(amount)),
            _ => return None,
        };
        Some(Message { news, instance, id })
    }

    /// Brings the local breaker to what the peer said.
    pub(crate) fn apply(&self, breaker: &Breaker) {
        let transition = match self.news {
            News::Open(retry_in) => breaker.remote_open(retry_in),
            News::Closed => breaker.remote_closed(),
            News::Held(_) => None,
        };
        heard(breaker, transition);
    }
}

/// A transition a peer caused: no call of this instance hears of it, so the global listeners
/// do here.
pub(crate) fn heard(breaker: &Breaker, transition: Option<Transition>) {
    if let Some(transition) = transition {
        events::breaker_transition(events::resolve(None), breaker.into(), transition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::{Admit, BreakerConfig, Verdict};
    use tokio::time::Instant;

    const COOLDOWN: Duration = Duration::from_secs(30);

    fn breaker() -> Breaker {
        Breaker::new("provider", BreakerConfig::new(2, COOLDOWN).unwrap())
    }

    #[test]
    fn a_reply_clears_only_the_announcement_it_answers() {
        let pending = Pending::default();
        let opened = pending.announce(OPENED);
        let closed = pending.announce(CLOSED);
        pending.published(opened);
        assert_eq!(
            pending.now() & STATE,
            CLOSED,
            "the closing is still to publish"
        );
        let reopened = pending.announce(OPENED);
        pending.published(closed);
        assert_eq!(
            pending.now(),
            reopened,
            "open, closed, open: the last opening stays"
        );
        pending.published(reopened);
        assert_eq!(pending.now() & STATE, 0, "nothing pending");
    }

    fn apply(breaker: &Breaker, text: &str) {
        Message::parse(text.as_bytes()).unwrap().apply(breaker);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_opening_starts_a_new_generation_for_what_is_left_of_its_cooldown() {
        let breaker = breaker();
        let Admit::Pass(before) = breaker.try_admit_closed() else {
            panic!("closed")
        };
        apply(&breaker, "open|peer|12000|resil:breaker:provider");
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.retry_in(Instant::now()), Duration::from_secs(12));
        assert_eq!(
            before.record(Verdict::Failure),
            None,
            "admitted before: counts nothing"
        );
        // A peer's longer cooldown is cut to this breaker's own.
        apply(&breaker, "open|peer|99999999|resil:breaker:provider");
        assert_eq!(breaker.retry_in(Instant::now()), COOLDOWN);
        apply(&breaker, "closed|peer|0|resil:breaker:provider");
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.failures(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operator_override_outranks_the_peers() {
        let breaker = breaker();
        breaker.force_open();
        apply(&breaker, "closed|peer|0|x");
        assert_eq!(breaker.state(), BreakerState::Open);
        breaker.reset();
        apply(&breaker, "closed|peer|0|x");
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_yielded_to_a_peer_reopens_for_the_peers_time() {
        let breaker = breaker();
        for _ in 0..2 {
            let Admit::Pass(admission) = breaker.try_admit_closed() else {
                panic!("closed")
            };
            admission.record(Verdict::Failure);
        }
        tokio::time::advance(COOLDOWN).await;
        let Admit::Pass(probe) = breaker.try_admit(Instant::now) else {
            panic!("the probe")
        };
        assert!(probe.is_probe());
        let (ticket, _) = probe.detach();
        breaker.yield_probe(ticket, Duration::from_millis(200));
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.retry_in(Instant::now()), Duration::from_millis(200));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(matches!(breaker.try_admit(Instant::now), Admit::Pass(p) if p.is_probe()));
    }

    #[test]
    fn messages_round_trip_and_strangers_are_ignored() {
        let text = Message::format("open", "ab12", 30_000, "resil:breaker:a|b");
        let message = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(message.news, News::Open(Duration::from_secs(30)));
        assert_eq!(message.instance, "ab12");
        assert_eq!(message.id, "resil:breaker:a|b");
        let text = Message::held("ab12", 1_500_000, "resil:rate:a=\"x|y\"");
        let message = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(message.news, News::Held(Duration::from_millis(1500)));
        assert_eq!(message.id, "resil:rate:a=\"x|y\"");
        for hostile in [
            &b"open|x|-1|id"[..],
            b"half|x|0|id",
            b"open|x",
            b"\xff\xfe",
            b"",
        ] {
            assert!(Message::parse(hostile).is_none());
        }
        assert!(Message::parse(b"open|x|99999999999999999999999|id").is_none());
    }
}
