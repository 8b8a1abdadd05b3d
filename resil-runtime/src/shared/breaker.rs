//! A shared breaker in Redis: the scripts that record its transitions and its half-open
//! probe's lock under its id, `resil:{breaker:NAME}` (`:open`, present while open and expiring
//! with the cooldown; `:probe`, the lock), and the messages instances exchange about it.

use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use super::scripts::{CLOSE, OPEN, PROBE, RELEASE};
use super::store::Store;
use crate::breaker::{Breaker, BreakerState, Transition};
use crate::events;
use crate::seams::{BreakerLink, Pending, ProbeAnswer};

/// The key present while the breaker is open.
pub(crate) fn open_key(link: &BreakerLink) -> String {
    format!("{}:open", link.id)
}

fn probe_key(link: &BreakerLink) -> String {
    format!("{}:probe", link.id)
}

impl Store {
    /// The script that publishes a transition Redis did not hear of, if the breaker is still
    /// in the state it reached, with what to hand [`Pending::published`] once it ran.
    pub(crate) fn pending(
        &self,
        link: &BreakerLink,
        breaker: &Breaker,
    ) -> Option<(ScriptInvocation<'static>, u64)> {
        let (untold, pending) = link.pending.untold(breaker.state());
        let invocation = untold.and_then(|state| match state {
            BreakerState::Open => self.opening(link, breaker),
            _ => Some(self.closing(link)),
        });
        if invocation.is_none() {
            link.pending.published(pending);
        }
        invocation.map(|invocation| (invocation, pending))
    }

    /// See [`SharedStore::announce`](crate::seams::SharedStore::announce).
    pub(crate) fn announce_transition(
        &self,
        link: &BreakerLink,
        breaker: &Breaker,
        to: BreakerState,
    ) {
        let (invocation, pending) = match to {
            BreakerState::Open => (self.opening(link, breaker), Pending::OPENED),
            BreakerState::Closed => (Some(self.closing(link)), Pending::CLOSED),
            BreakerState::HalfOpen => return,
        };
        let Some(invocation) = invocation else { return };
        let announced = link.pending.announce(pending);
        self.spawn_eval(
            link.sharing.timeout,
            open_key(link),
            invocation,
            Some((Arc::clone(&link.pending), announced)),
        );
    }

    /// The script that records the closing and tells the peers.
    fn closing(&self, link: &BreakerLink) -> ScriptInvocation<'static> {
        let message = Message::format("closed", self.instance(), 0, &link.id);
        let mut invocation = CLOSE.key(open_key(link));
        invocation
            .key(probe_key(link))
            .arg(message)
            .arg(self.instance());
        invocation
    }

    /// The script that records the breaker's opening, for what is left of its cooldown.
    fn opening(&self, link: &BreakerLink, breaker: &Breaker) -> Option<ScriptInvocation<'static>> {
        let left = breaker.retry_in(tokio::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let millis = millis(left);
        let message = Message::format("open", self.instance(), millis, &link.id);
        let mut invocation = OPEN.key(open_key(link));
        invocation
            .key(probe_key(link))
            .arg(millis)
            .arg(message)
            .arg(self.instance());
        Some(invocation)
    }

    /// See [`SharedStore::acquire_probe`](crate::seams::SharedStore::acquire_probe).
    pub(crate) async fn probe(&self, link: &BreakerLink, limit: Duration) -> ProbeAnswer {
        let mut invocation = PROBE.key(open_key(link));
        invocation
            .key(probe_key(link))
            .arg(self.instance())
            .arg(millis(limit));
        let key = open_key(link);
        match self
            .eval::<u64>(link.sharing.timeout, &key, &invocation)
            .await
        {
            Some(0) => ProbeAnswer::Granted,
            Some(wait) => ProbeAnswer::Peer(Duration::from_millis(wait)),
            None => ProbeAnswer::Unavailable,
        }
    }

    /// See [`SharedStore::release_probe`](crate::seams::SharedStore::release_probe).
    pub(crate) fn release(&self, link: &BreakerLink) {
        let key = probe_key(link);
        let mut invocation = RELEASE.key(&key);
        invocation.arg(self.instance());
        self.spawn_eval(link.sharing.timeout, key, invocation, None);
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

    fn apply(breaker: &Breaker, text: &str) {
        Message::parse(text.as_bytes()).unwrap().apply(breaker);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_opening_starts_a_new_generation_for_what_is_left_of_its_cooldown() {
        let breaker = breaker();
        let Admit::Pass(before) = breaker.try_admit_closed() else {
            panic!("closed")
        };
        apply(&breaker, "open|peer|12000|resil:{breaker:provider}");
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.retry_in(Instant::now()), Duration::from_secs(12));
        assert_eq!(
            before.record(Verdict::Failure),
            None,
            "admitted before: counts nothing"
        );
        // A peer's longer cooldown is cut to this breaker's own.
        apply(&breaker, "open|peer|99999999|resil:{breaker:provider}");
        assert_eq!(breaker.retry_in(Instant::now()), COOLDOWN);
        apply(&breaker, "closed|peer|0|resil:{breaker:provider}");
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
        let text = Message::format("open", "ab12", 30_000, "resil:{breaker:a|b}");
        let message = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(message.news, News::Open(Duration::from_secs(30)));
        assert_eq!(message.instance, "ab12");
        assert_eq!(message.id, "resil:{breaker:a|b}");
        let text = Message::held("ab12", 1_500_000, "resil:{gate:a=\"x|y\"}:rate");
        let message = Message::parse(text.as_bytes()).unwrap();
        assert_eq!(message.news, News::Held(Duration::from_millis(1500)));
        assert_eq!(message.id, "resil:{gate:a=\"x|y\"}:rate");
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
