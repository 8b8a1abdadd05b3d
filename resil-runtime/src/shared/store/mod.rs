//! [`Store`]: one connection to Redis, one subscription to the breakers' channel, and the
//! task that keeps both up, tells when Redis is gone and re-syncs when it is back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, ScriptInvocation};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::{sleep, timeout};

use super::breaker::{open_key, Message, News};
use super::listed::Listed;
use super::scripts::{CHANNEL, CLOSE, OPEN};
use super::SharedError;
use crate::events;
use crate::seams::{Announcement, BreakerNews, GateNews, SharedStore};
use crate::sync::{lock_std, read_std, write_std};

mod seam;

/// How long connecting (TCP, handshake, subscription) may take before it counts as failed.
const CONNECT: Duration = Duration::from_secs(1);
/// How long the task waits for a PING after an operation timed out: Redis may only be slow.
const CHECK: Duration = Duration::from_secs(1);
/// The reconnection backoff's first step and cap: a fleet's reconnections spread over a
/// second or two, and an instance is back at most 2 s after Redis is.
const RECONNECT_BASE: Duration = Duration::from_millis(100);
const RECONNECT_CAP: Duration = Duration::from_secs(2);

pub(crate) struct Store {
    /// Itself, for the tasks it spawns: what the breakers and gates hold is a `&dyn
    /// SharedStore`.
    me: Weak<Store>,
    instance: Arc<str>,
    url: Mutex<Option<Arc<str>>>,
    task: Mutex<Option<AbortHandle>>,
    /// The connection, kept while it may still work; `available` says whether to use it.
    connection: RwLock<Option<MultiplexedConnection>>,
    available: AtomicBool,
    /// Whether the current outage was told (from the first failure to the next answer).
    in_outage: AtomicBool,
    /// The shared breakers of this process, by their Redis name (several, for keys of a
    /// keyed policy that are unequal but print alike: they share the name, and hear its news).
    breakers: Listed<BreakerNews>,
    /// The shared gates of this process, by their Redis key: other instances' throttles
    /// reach them.
    gates: Listed<GateNews>,
    /// Wakes the task when an operation failed: it checks whether Redis still answers.
    check: Arc<Notify>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(task) = lock_std(&self.task).take() {
            task.abort();
        }
    }
}

impl Store {
    pub(crate) fn new() -> Arc<Self> {
        let instance: u64 = rand::rng().random();
        Arc::new_cyclic(|me| Store {
            me: Weak::clone(me),
            instance: Arc::from(format!("{instance:016x}")),
            url: Mutex::new(None),
            task: Mutex::new(None),
            connection: RwLock::new(None),
            available: AtomicBool::new(false),
            in_outage: AtomicBool::new(false),
            breakers: Listed::default(),
            gates: Listed::default(),
            check: Arc::new(Notify::new()),
        })
    }

    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    pub(crate) fn url(&self) -> Option<Arc<str>> {
        lock_std(&self.url).clone()
    }

    pub(crate) fn is_attached(&self) -> bool {
        lock_std(&self.task).is_some()
    }

    pub(crate) fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Points the store at a server: starts the task that connects (replacing any earlier
    /// one) and returns once its first attempt has ended, connected or not.
    pub(crate) async fn attach(
        self: &Arc<Self>,
        client: redis::Client,
        url: String,
    ) -> Result<(), SharedError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| SharedError::NoRuntime)?;
        *lock_std(&self.url) = Some(Arc::from(url));
        let (contacted, first) = oneshot::channel();
        let task = runtime.spawn(keep_up(
            Arc::downgrade(self),
            Arc::clone(&self.check),
            client,
            contacted,
        ));
        if let Some(previous) = lock_std(&self.task).replace(task.abort_handle()) {
            previous.abort();
        }
        // The task ends before its first contact only by panicking: a runtime without its IO
        // or time driver.
        first.await.map_err(|_| SharedError::NoRuntime)
    }

    /// Lists a shared breaker, so that what peers publish about it reaches it; a breaker
    /// listed while Redis answers learns at once of an opening in force.
    fn register(&self, breaker: BreakerNews) {
        self.breakers.list(breaker.clone());
        let runtime = tokio::runtime::Handle::try_current();
        if let (true, Ok(runtime), Some(store)) = (self.is_available(), runtime, self.me.upgrade())
        {
            runtime.spawn(async move {
                let connection = read_std(&store.connection).clone();
                if let Some(connection) = connection {
                    let _ = sync(&store, &connection, std::slice::from_ref(&breaker)).await;
                }
            });
        }
    }

    /// Runs a script if Redis answers within `limit`. `None` when it does not (or is known to
    /// be down): the caller decides locally, and the first failure of an outage says so.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        limit: Duration,
        invocation: &ScriptInvocation<'_>,
    ) -> Option<T> {
        if !SharedStore::usable(self) {
            return None;
        }
        let mut connection = read_std(&self.connection).clone()?;
        match timeout(limit, invocation.invoke_async(&mut connection)).await {
            Ok(Ok(answer)) => {
                self.outage_ends();
                Some(answer)
            }
            Ok(Err(error)) if unreachable(&error) => {
                self.lost(&error.to_string());
                None
            }
            Ok(Err(error)) => {
                // Redis answers but refuses the script (out of memory, a replica, still
                // loading): no reconnection, but the policies decide locally until a script
                // runs again.
                self.outage_begins(&format!("Redis refused: {error}"));
                None
            }
            Err(_) => {
                self.lost(&format!("no answer within {limit:?} (shared_timeout)"));
                None
            }
        }
    }

    /// Runs a script in the background, for what no caller waits on (publishing a
    /// transition, giving a slot back). `announcement` is published once Redis has run it (see
    /// [`Announcement::published`]); false when it was not even sent (Redis is down, or no
    /// runtime).
    pub(crate) fn spawn_eval(
        &self,
        limit: Duration,
        invocation: ScriptInvocation<'static>,
        announcement: Option<Announcement>,
    ) -> bool {
        if !self.is_available() {
            return false;
        }
        let (Ok(runtime), Some(store)) = (tokio::runtime::Handle::try_current(), self.me.upgrade())
        else {
            return false;
        };
        runtime.spawn(async move {
            let ran: Option<redis::Value> = store.eval(limit, &invocation).await;
            if let (Some(_), Some(announcement)) = (ran, announcement) {
                announcement.published();
            }
        });
        true
    }

    /// Redis stopped answering: decide locally from now on, and say so once per outage.
    fn lost(&self, reason: &str) {
        if self.available.swap(false, Ordering::AcqRel) {
            self.check.notify_one();
        }
        self.outage_begins(reason);
    }

    /// An outage begins (Redis gone, or refusing scripts), said once: it lasts to the next
    /// answer.
    fn outage_begins(&self, reason: &str) {
        if !self.in_outage.swap(true, Ordering::AcqRel) {
            let url = self.url().unwrap_or_else(|| Arc::from(""));
            events::shared_store(&url, Some(reason));
        }
    }

    /// Redis answered: the outage, if one was said, is over. A load first, since every script
    /// that runs comes here.
    fn outage_ends(&self) {
        if self.in_outage.load(Ordering::Acquire) && self.in_outage.swap(false, Ordering::AcqRel) {
            let url = self.url().unwrap_or_else(|| Arc::from(""));
            events::shared_store(&url, None);
        }
    }

    /// Redis answers (again): re-sync every shared breaker, then use it. A breaker that
    /// cannot be re-synced ends the session: the task reconnects.
    async fn up(&self, connection: MultiplexedConnection) -> Result<(), String> {
        *write_std(&self.connection) = Some(connection.clone());
        let breakers = self.breakers.all();
        sync(self, &connection, &breakers)
            .await
            .map_err(|error| format!("re-sync failed: {error}"))?;
        self.available.store(true, Ordering::Release);
        // The slots the local gates promised meanwhile are taken again from Redis: run beside
        // its schedule, which does not count them, they would double the rate.
        for gate in self.gates.all() {
            gate.store_returned();
        }
        self.outage_ends();
        Ok(())
    }

    /// What a peer published.
    fn receive(&self, payload: &[u8]) {
        let Some(message) = Message::parse(payload) else {
            return;
        };
        if message.instance == &*self.instance {
            return;
        }
        if let News::Held(_) = message.news {
            for gate in self.gates.named(message.id) {
                gate.throttled_elsewhere();
            }
            return;
        }
        for breaker in self.breakers.named(message.id) {
            message.apply(&breaker);
        }
    }
}

/// Brings shared breakers in line with Redis: a transition made here that Redis did not hear
/// of is published (it is the newest news); the others learn of the openings Redis holds. One
/// pipelined round trip however many breakers there are (and one more to load the scripts a
/// restarted Redis no longer has).
async fn sync(
    store: &Store,
    connection: &MultiplexedConnection,
    breakers: &[BreakerNews],
) -> redis::RedisResult<()> {
    let mut connection = connection.clone();
    let mut asked = Vec::new();
    let mut published = Vec::new();
    let mut pipe = redis::pipe();
    for breaker in breakers {
        match breaker.untold() {
            Some(announcement) => {
                pipe.invoke_script(&store.recording(&announcement)).ignore();
                published.push(announcement);
            }
            None => {
                pipe.cmd("PTTL").arg(open_key(breaker.name()));
                asked.push(breaker);
            }
        }
    }
    if asked.is_empty() && published.is_empty() {
        return Ok(());
    }
    // A pipeline sends EVALSHA without falling back to EVAL: the scripts must be there.
    if !published.is_empty() {
        for script in [&*OPEN, &*CLOSE] {
            timeout(CHECK, script.load_async(&mut connection))
                .await
                .map_err(|_| timed_out())??;
        }
    }
    let open_for: Vec<i64> = timeout(CHECK, pipe.query_async(&mut connection))
        .await
        .map_err(|_| timed_out())??;
    for announcement in published {
        announcement.published();
    }
    for (breaker, open_for) in asked.into_iter().zip(open_for) {
        if open_for > 0 {
            breaker.opened_elsewhere(Duration::from_millis(open_for.unsigned_abs()));
        }
    }
    Ok(())
}

/// The store's task: connect, subscribe, re-sync, listen; when Redis goes, reconnect with
/// jittered backoff so that a fleet of instances does not reconnect in lockstep.
async fn keep_up(
    store: Weak<Store>,
    check: Arc<Notify>,
    client: redis::Client,
    contacted: oneshot::Sender<()>,
) {
    let mut contacted = Some(contacted);
    let mut failures = 0u32;
    loop {
        let reason = match connect(&client).await {
            Ok((connection, pubsub)) => {
                let Some(strong) = store.upgrade() else {
                    return;
                };
                let synced = strong.up(connection.clone()).await;
                drop(strong);
                match synced {
                    Err(reason) => reason,
                    Ok(()) => {
                        if let Some(contacted) = contacted.take() {
                            let _ = contacted.send(());
                        }
                        failures = 0;
                        listen(&store, &check, connection, pubsub).await
                    }
                }
            }
            Err(error) => error.to_string(),
        };
        let Some(strong) = store.upgrade() else {
            return;
        };
        strong.lost(&reason);
        drop(strong);
        if let Some(contacted) = contacted.take() {
            let _ = contacted.send(());
        }
        failures = failures.saturating_add(1);
        sleep(reconnect_wait(failures)).await;
    }
}

async fn connect(
    client: &redis::Client,
) -> redis::RedisResult<(MultiplexedConnection, redis::aio::PubSub)> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT))
        .set_response_timeout(Some(CONNECT));
    let connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut pubsub = timeout(CONNECT, client.get_async_pubsub())
        .await
        .map_err(|_| timed_out())??;
    timeout(CONNECT, pubsub.subscribe(CHANNEL))
        .await
        .map_err(|_| timed_out())??;
    Ok((connection, pubsub))
}

/// Whether an error says Redis cannot be reached (rather than that it refused a command).
fn unreachable(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
}

fn timed_out() -> redis::RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}

/// Hands what peers publish to the breakers until the subscription ends or Redis stops
/// answering; returns why.
async fn listen(
    store: &Weak<Store>,
    check: &Notify,
    connection: MultiplexedConnection,
    pubsub: redis::aio::PubSub,
) -> String {
    let mut messages = pubsub.into_on_message();
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else {
                    return "the subscription ended (connection lost)".to_owned();
                };
                let Some(store) = store.upgrade() else { return String::new() };
                store.receive(message.get_payload_bytes());
            }
            () = check.notified() => {
                let mut ping = connection.clone();
                let answer = timeout(CHECK, redis::cmd("PING").query_async::<String>(&mut ping)).await;
                if !matches!(answer, Ok(Ok(_))) {
                    return format!("no answer to PING within {CHECK:?}");
                }
                let Some(store) = store.upgrade() else { return String::new() };
                if let Err(reason) = store.up(connection.clone()).await {
                    return reason;
                }
            }
        }
    }
}

/// Equal jitter: half the exponential step for sure, half at random.
fn reconnect_wait(failures: u32) -> Duration {
    let step = RECONNECT_BASE
        .saturating_mul(1 << failures.min(10))
        .min(RECONNECT_CAP);
    step / 2 + rand::rng().random_range(Duration::ZERO..=step / 2)
}

/// The URL as it may be shown: without its password.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redacted("redis://:hunter2@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1/"), "redis://127.0.0.1/");
        assert_eq!(redacted("not a url@"), "not a url@");
    }

    #[test]
    fn reconnects_spread_and_stay_bounded() {
        for failures in [1, 5, 40, u32::MAX] {
            let wait = reconnect_wait(failures);
            assert!(wait <= RECONNECT_CAP && wait >= RECONNECT_BASE, "{wait:?}");
        }
    }
}
