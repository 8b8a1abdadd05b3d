//! A shared breaker in Redis: the scripts that record its transitions and its half-open
//! probe's lock under its id, `resil:{breaker:NAME}` (`:open`, present while open and expiring
//! with the cooldown; `:probe`, the lock; `:window`, the calls of a time window summed over
//! the instances), and the messages instances exchange about it.

use std::time::Duration;

use redis::ScriptInvocation;

use super::scripts::{CLOSE, OPEN, PROBE, RELEASE, WINDOW};
use super::store::Store;
use crate::seams::{
    whole_micros, Announcement, BreakerLink, BreakerNews, Change, Probe, Unavailable, WindowBatch,
    WindowSums,
};

/// The key present while the breaker `id` is open.
pub(crate) fn open_key(id: &str) -> String {
    format!("{id}:open")
}

fn probe_key(id: &str) -> String {
    format!("{id}:probe")
}

/// The hash of the breaker's time window, summed over the instances.
fn window_key(id: &str) -> String {
    format!("{id}:window")
}

impl Store {
    /// See [`SharedStore::announce`](crate::seams::SharedStore::announce).
    pub(crate) fn announce_transition(&self, announcement: Announcement) {
        let invocation = self.recording(&announcement);
        let key = open_key(announcement.breaker());
        self.spawn_eval(announcement.timeout(), key, invocation, Some(announcement));
    }

    /// The script that records a transition and tells the peers.
    pub(crate) fn recording(&self, announcement: &Announcement) -> ScriptInvocation<'static> {
        match announcement.change() {
            Change::Opened(left) => self.opening(announcement.breaker(), left),
            _ => self.closing(announcement.breaker()),
        }
    }

    /// The script that records the closing and tells the peers.
    fn closing(&self, id: &str) -> ScriptInvocation<'static> {
        let message = Message::format("closed", self.instance(), 0, id);
        let mut invocation = CLOSE.key(open_key(id));
        invocation
            .key(probe_key(id))
            .key(window_key(id))
            .arg(message)
            .arg(self.instance());
        invocation
    }

    /// The script that records the breaker's opening, for `left` of its cooldown.
    fn opening(&self, id: &str, left: Duration) -> ScriptInvocation<'static> {
        let millis = millis(left);
        let message = Message::format("open", self.instance(), millis, id);
        let mut invocation = OPEN.key(open_key(id));
        invocation
            .key(probe_key(id))
            .key(window_key(id))
            .arg(millis)
            .arg(message)
            .arg(self.instance());
        invocation
    }

    /// See [`SharedStore::acquire_probe`](crate::seams::SharedStore::acquire_probe).
    pub(crate) async fn probe(
        &self,
        link: &BreakerLink,
        limit: Duration,
    ) -> Result<Probe, Unavailable> {
        let mut invocation = PROBE.key(open_key(&link.id));
        invocation
            .key(probe_key(&link.id))
            .arg(self.instance())
            .arg(millis(limit));
        let key = open_key(&link.id);
        match self
            .eval::<u64>(link.sharing.timeout, &key, &invocation)
            .await
        {
            Some(0) => Ok(Probe::Granted),
            Some(wait) => Ok(Probe::Elsewhere(Duration::from_millis(wait))),
            None => Err(Unavailable),
        }
    }

    /// See [`SharedStore::release_probe`](crate::seams::SharedStore::release_probe).
    pub(crate) fn release(&self, link: &BreakerLink) {
        let key = probe_key(&link.id);
        let mut invocation = RELEASE.key(&key);
        invocation.arg(self.instance());
        self.spawn_eval(link.sharing.timeout, key, invocation, None);
    }
}

impl Store {
    /// See [`SharedStore::add_to_window`](crate::seams::SharedStore::add_to_window): one
    /// script per batch.
    pub(crate) async fn add_to_window(
        &self,
        link: &BreakerLink,
        batch: WindowBatch,
    ) -> Result<WindowSums, Unavailable> {
        let key = window_key(&link.id);
        let mut invocation = WINDOW.key(&key);
        invocation
            .arg(whole_micros(batch.width()).max(1))
            .arg(batch.buckets())
            .arg(batch.calls())
            .arg(batch.bad())
            .arg(millis(batch.expiry()));
        let sums: Vec<u64> = self
            .eval(link.sharing.timeout, &key, &invocation)
            .await
            .ok_or(Unavailable)?;
        match *sums.as_slice() {
            [calls, bad] => Ok(WindowSums::new(calls, bad)),
            _ => Err(Unavailable),
        }
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
    pub(crate) fn apply(&self, breaker: &BreakerNews) {
        match self.news {
            News::Open(retry_in) => breaker.opened_elsewhere(retry_in),
            News::Closed => breaker.closed_elsewhere(),
            News::Held(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::{Admit, Breaker, BreakerConfig, BreakerState, Verdict};
    use std::sync::Arc;
    use tokio::time::Instant;

    const COOLDOWN: Duration = Duration::from_secs(30);

    /// A breaker shared through an in-memory store, as the store's news reaches it.
    fn breaker() -> (Arc<Breaker>, BreakerNews) {
        let breaker = Arc::new(Breaker::new(
            "provider",
            BreakerConfig::new(2, COOLDOWN).unwrap(),
        ));
        let policy = crate::Policy::builder()
            .breaker(Arc::clone(&breaker))
            .shared_in(crate::shared::InMemory::new())
            .build()
            .unwrap();
        drop(policy);
        let news = BreakerNews::new(
            Arc::from("resil:{breaker:provider}"),
            Arc::downgrade(&breaker) as std::sync::Weak<Breaker>,
        );
        (breaker, news)
    }

    fn apply(breaker: &BreakerNews, text: &str) {
        Message::parse(text.as_bytes()).unwrap().apply(breaker);
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_opening_starts_a_new_generation_for_what_is_left_of_its_cooldown() {
        let (breaker, news) = breaker();
        let Admit::Pass(before) = breaker.try_admit_closed() else {
            panic!("closed")
        };
        apply(&news, "open|peer|12000|resil:{breaker:provider}");
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.retry_in(Instant::now()), Duration::from_secs(12));
        assert_eq!(
            before.record(Verdict::Failure),
            None,
            "admitted before: counts nothing"
        );
        // A peer's longer cooldown is cut to this breaker's own.
        apply(&news, "open|peer|99999999|resil:{breaker:provider}");
        assert_eq!(breaker.retry_in(Instant::now()), COOLDOWN);
        apply(&news, "closed|peer|0|resil:{breaker:provider}");
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.failures(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operator_override_outranks_the_peers() {
        let (breaker, news) = breaker();
        breaker.force_open();
        apply(&news, "closed|peer|0|x");
        assert_eq!(breaker.state(), BreakerState::Open);
        breaker.reset();
        apply(&news, "closed|peer|0|x");
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_yielded_to_a_peer_reopens_for_the_peers_time() {
        let (breaker, _) = breaker();
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
