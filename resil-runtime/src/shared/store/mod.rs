//! [`Store`]: one connection to Redis (a server, or a cluster's nodes), one subscription to
//! the breakers' channel, and the task that keeps both up, tells when Redis is gone and
//! re-syncs when it is back.
//!
//! On one server, a failure makes the whole store unavailable until the task's PING is
//! answered again. On a cluster, a failure is its node's ([`Nodes`]): that node's keys decide
//! locally for a while, the others keep sharing, and the store stays available.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use rand::Rng;
use redis::{FromRedisValue, ScriptInvocation};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::{timeout, Instant};

use super::breaker::{Message, News};
use super::listed::Listed;
use super::target::{Connection, Target};
use super::SharedError;
use crate::events;
use crate::seams::{Announcement, BreakerNews, GateNews, SharedStore};
use crate::sync::{lock_std, read_std, write_std};

mod cluster;
mod nodes;
mod seam;
mod task;

use nodes::Nodes;
use task::{keep_up, sync};

pub(crate) struct Store {
    /// Itself, for the tasks it spawns: what the breakers and gates hold is a `&dyn
    /// SharedStore`.
    me: Weak<Store>,
    instance: Arc<str>,
    url: Mutex<Option<Arc<str>>>,
    task: Mutex<Option<AbortHandle>>,
    /// The connection, kept while it may still work; `available` says whether to use it.
    connection: RwLock<Option<Connection>>,
    available: AtomicBool,
    /// Whether the current outage was told (from the first failure to the next answer).
    in_outage: AtomicBool,
    /// The latest failure's reason, until Redis answers again.
    last_error: Mutex<Option<Arc<str>>>,
    /// Whether the store is a cluster's: a failure is then its node's.
    cluster: AtomicBool,
    nodes: Nodes,
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
            last_error: Mutex::new(None),
            cluster: AtomicBool::new(false),
            nodes: Nodes::default(),
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

    pub(crate) fn last_error(&self) -> Option<String> {
        lock_std(&self.last_error).as_deref().map(str::to_owned)
    }

    fn is_cluster(&self) -> bool {
        self.cluster.load(Ordering::Acquire)
    }

    /// Whether the keys `a` and `b` cannot go in one script: on a cluster, in two slots.
    pub(crate) fn apart(&self, a: &str, b: &str) -> bool {
        self.is_cluster() && nodes::slot(a) != nodes::slot(b)
    }

    /// Points the store at a server: starts the task that connects (replacing any earlier
    /// one) and returns once its first attempt has ended, connected or not.
    pub(crate) async fn attach(
        self: &Arc<Self>,
        target: Target,
        url: String,
    ) -> Result<(), SharedError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| SharedError::NoRuntime)?;
        *lock_std(&self.url) = Some(Arc::from(url));
        self.cluster.store(target.is_cluster(), Ordering::Release);
        let (contacted, first) = oneshot::channel();
        let task = runtime.spawn(keep_up(
            Arc::downgrade(self),
            Arc::clone(&self.check),
            target,
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

    /// Runs a script whose first key is `key` if Redis answers within `limit`. `None` when it
    /// does not (or is known to be down, or `key`'s cluster node is): the caller decides
    /// locally, and the first failure of an outage says so.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        limit: Duration,
        key: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Option<T> {
        if !SharedStore::usable(self) {
            return None;
        }
        self.eval_on(limit, key, invocation).await
    }

    /// [`Store::eval`] on the connection, whether or not the store counts as available yet
    /// (for the re-sync that makes it so).
    async fn eval_on<T: FromRedisValue>(
        &self,
        limit: Duration,
        key: &str,
        invocation: &ScriptInvocation<'_>,
    ) -> Option<T> {
        let mut connection = read_std(&self.connection).clone()?;
        let node = self.is_cluster().then(|| self.nodes.of(key));
        if node.as_deref().is_some_and(|node| self.nodes.skipped(node)) {
            return None;
        }
        let asked = Asked::new(self, node, limit);
        let answer = timeout(limit, invocation.invoke_async(&mut connection)).await;
        if let Some(node) = asked.answered() {
            return match answer {
                Ok(Ok(answer)) => {
                    self.node_answered(&node);
                    Some(answer)
                }
                Ok(Err(error)) => {
                    self.node_failed(&node, &error.to_string());
                    None
                }
                Err(_) => {
                    self.node_failed(&node, &late(limit));
                    None
                }
            };
        }
        match answer {
            Ok(Ok(answer)) => {
                self.outage_ends();
                Some(answer)
            }
            Ok(Err(error)) if task::unreachable(&error) => {
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
                self.lost(&late(limit));
                None
            }
        }
    }

    /// Runs a script whose first key is `key` in the background, for what no caller waits on
    /// (publishing a transition, giving a slot back). `announcement` is published once Redis
    /// has run it (see [`Announcement::published`]); false when it was not even sent (Redis
    /// is down, or no runtime).
    pub(crate) fn spawn_eval(
        &self,
        limit: Duration,
        key: String,
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
            let ran: Option<redis::Value> = store.eval(limit, &key, &invocation).await;
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

    /// Tells the listeners that the store (or its cluster `node`) stopped answering, and
    /// why, or (no reason) that it answers again.
    fn tell(&self, node: Option<&str>, reason: Option<&str>) {
        let url = self.url().unwrap_or_else(|| Arc::from(""));
        match node {
            Some(node) => events::shared_store(&format!("{url} node {node}"), reason),
            None => events::shared_store(&url, reason),
        }
    }

    /// An outage begins (Redis gone, or refusing scripts), said once: it lasts to the next
    /// answer.
    fn outage_begins(&self, reason: &str) {
        *lock_std(&self.last_error) = Some(Arc::from(reason));
        if !self.in_outage.swap(true, Ordering::AcqRel) {
            self.tell(None, Some(reason));
        }
    }

    /// Redis answered: the outage, if one was said, is over. A load first, since every script
    /// that runs comes here.
    fn outage_ends(&self) {
        if self.in_outage.load(Ordering::Acquire) && self.in_outage.swap(false, Ordering::AcqRel) {
            self.error_over();
            self.tell(None, None);
        }
    }

    /// Forgets the last failure unless a cluster node is still out; under the error's lock,
    /// which a node's failure holds while it goes out, so that one never ends up without it.
    fn error_over(&self) {
        let mut error = lock_std(&self.last_error);
        if !self.nodes.any_out() {
            *error = None;
        }
    }

    /// Redis answers (again): re-sync every shared breaker, then use it. A breaker that
    /// cannot be re-synced ends the session: the task reconnects (on a cluster, it is its
    /// node's failure).
    async fn up(&self, connection: Connection) -> Result<(), String> {
        *write_std(&self.connection) = Some(connection.clone());
        if self.is_cluster() {
            self.learn_slots().await;
            let nodes = self.nodes.all();
            futures_util::future::join_all(nodes.iter().map(|node| self.load_scripts(node))).await;
        }
        let breakers = self.breakers.all();
        sync(self, &connection, &breakers)
            .await
            .map_err(|error| format!("re-sync failed: {error}"))?;
        // The slots the local gates promised meanwhile are taken again from Redis: run beside
        // its schedule, which does not count them, they would double the rate. (A cluster's
        // store that only moved its subscription promised none.)
        if !self.available.swap(true, Ordering::AcqRel) {
            for gate in self.gates.all() {
                gate.store_returned();
            }
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

/// A script sent to a cluster node, until it is answered. resil bounds the wait by
/// `shared_timeout` too, and when its timer fires first, it drops the call and tells the store
/// ([`SharedStore::timed_out`]) without saying which node was late: dropped unanswered once its
/// time is up, the call is its node's failure, as its own timeout's would have been; dropped
/// sooner, its caller went away, and the node is not blamed.
struct Asked<'a> {
    store: &'a Store,
    node: Option<Arc<str>>,
    limit: Duration,
    until: Instant,
}

impl<'a> Asked<'a> {
    fn new(store: &'a Store, node: Option<Arc<str>>, limit: Duration) -> Self {
        let until = Instant::now() + limit;
        Asked {
            store,
            node,
            limit,
            until,
        }
    }

    /// The node asked (none on one server), its answer come, or its own timeout.
    fn answered(mut self) -> Option<Arc<str>> {
        self.node.take()
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        // resil's timer and the call's, started a moment apart, fire in one millisecond.
        let due = Instant::now() + Duration::from_millis(1) >= self.until;
        if let (Some(node), true) = (self.node.take(), due) {
            self.store.node_failed(&node, &late(self.limit));
        }
    }
}

/// Why a call failed that was not answered in time.
fn late(limit: Duration) -> String {
    format!("no answer within {limit:?} (shared_timeout)")
}

/// The URL as it may be shown: without any credential redis-rs reads from it. That is the
/// user and password before the host (`redis://user:pass@host`), and for a Unix socket the
/// query's `user` and `pass` (`redis+unix:///path?pass=...`): everything from the scheme to
/// the URL's last `@` is hidden first (a password may hold a `?`, a `#` or a `/` that a
/// parser would take for the end of the host, and then print it), then every query value but
/// `db` and `protocol` (so a key spelt in percent-escapes, `p%61ss`, is hidden too), and a
/// fragment.
pub(crate) fn redacted(url: &str) -> String {
    let hidden = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    };
    let (rest, fragment) = match hidden.split_once('#') {
        Some((rest, _)) => (rest, "#***"),
        None => (hidden.as_str(), ""),
    };
    let (base, query) = match rest.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (rest, None),
    };
    let mut shown = base.to_owned();
    if let Some(query) = query {
        shown.push('?');
        for (i, pair) in query.split('&').enumerate() {
            if i > 0 {
                shown.push('&');
            }
            match pair.split_once('=') {
                Some((key @ ("db" | "protocol"), value)) => {
                    shown.push_str(&format!("{key}={value}"));
                }
                Some((key, _)) => shown.push_str(&format!("{key}=***")),
                None => shown.push_str(pair),
            }
        }
    }
    shown + fragment
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
    fn unix_socket_credentials_are_not_shown() {
        assert_eq!(
            redacted("redis+unix:///run/redis.sock?db=2&user=app&pass=hunter2"),
            "redis+unix:///run/redis.sock?db=2&user=***&pass=***"
        );
        assert_eq!(
            redacted("unix:///run/redis.sock?p%61ss=hunter2&protocol=resp3#hunter2"),
            "unix:///run/redis.sock?p%61ss=***&protocol=resp3#***"
        );
        // An `@` in the query: all before it is hidden, the password with it.
        assert_eq!(
            redacted("redis://:hunter2@host/0?pass=a@b"),
            "redis://***@b"
        );
        // A password holding a `?` or a `#`, which a parser takes for the host's end.
        assert_eq!(redacted("redis://:hunt?er2@host"), "redis://***@host");
        assert_eq!(redacted("redis://:hunt#er2@host/0"), "redis://***@host/0");
    }
}
