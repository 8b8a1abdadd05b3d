//! State shared by many instances of a service: breakers that open and close together, and
//! rate gates that hold a limit across every instance, kept in a store every instance reaches.
//!
//! | store | feature | for |
//! |---|---|---|
//! | [`Redis`] | `redis` | instances of a service, in any number of processes |
//! | [`InMemory`] | `shared` | the policies and runtimes of one process; tests of many instances ([`InMemory::instance`]) |
//! | your own, through [`SharedStore`] | `shared` | state kept elsewhere (Postgres, etcd, DynamoDB…), without redis-rs |
//!
//! A policy is shared in the process's Redis store by `shared = true` (or
//! `PolicyBuilder::shared`), or in any store by
//! [`PolicyBuilder::shared_in`](crate::PolicyBuilder::shared_in). What follows holds for every
//! store: resil bounds every answer it waits for by `shared_timeout`, and decides locally
//! when a store errs, is late or is down. Redis and [`InMemory`] also sum shared windows over
//! the instances ([`SharedStore::add_to_window`]) and count a gate's instances for each one's
//! share while the store is down ([`Ask::heartbeat`]); a store of your own may, or leave
//! both to each instance. [`conformance`] (feature `conformance`) checks a
//! store keeps the semantics [`SharedStore`] states.
//!
//! # Redis
//!
//! [`Redis::connect`] installs the process's store; a policy declared `shared = true` (or
//! built with [`PolicyBuilder::shared`](crate::PolicyBuilder::shared)) keeps its breaker and
//! rate gates there, under keys that name the breaker or the function (and the key value, for
//! state per key):
//!
//! | what | Redis key | lives |
//! |---|---|---|
//! | a breaker's opening | `resil:{breaker:NAME}:open` | its cooldown |
//! | the half-open probe's lock | `resil:{breaker:NAME}:probe` | the probe's own limit |
//! | a shared window's buckets | `resil:{breaker:NAME}:window` | a window after its last batch |
//! | a rate gate | `resil:{gate:FN}:rate`, `resil:{gate:FN}:tokens` (`resil:{gate:FN:LABEL=KEY}:…` per key) | until its slots are past |
//! | the instances using a gate | `resil:{gate:FN}:rate:seen` (and the others' `…:seen`) | 5 s after the last heartbeat |
//!
//! The part in braces is the key's Redis Cluster hash tag: every key one script touches
//! shares it (a breaker's opening, probe lock and window; a function's rate and token gates
//! and their instances), so the script runs on one node, and different breakers and gates
//! spread over the nodes. A name's own `%`, `{` and `}` are percent-encoded (`%25`, `%7B`,
//! `%7D`), so no name ends or splits its tag and two names are always two keys.
//!
//! - **Breaker.** The local state stays the fast path: a closed breaker admits with one atomic
//!   load and never waits on Redis. Opening and closing are written and published on the
//!   channel `resil:breakers`, so every instance's breaker follows within a round trip; once
//!   the cooldown is over, one probe is sent across all instances (an atomic lock that expires
//!   with the probe's timeout); the others reject until its verdict arrives. A remote
//!   transition starts a new local generation, as a local one does: a call admitted before it
//!   counts for nothing after it.
//! - **Windows.** A failure-rate or slow-call breaker with a window in time judges the calls of
//!   every instance: each adds its calls to the window in Redis in batches (one script per
//!   100 ms per breaker at most, none while idle) and judges the sums plus what it has not
//!   sent. A window counted in calls cannot be shared, and is refused.
//! - **Rate gates.** GCRA in one atomic Lua script per attempt (the rate and the token gate
//!   together), on Redis's clock: the limit holds for the sum of the instances. One
//!   reservation a second also tells Redis this instance uses the gate.
//! - **Fail-open.** When Redis is unreachable or answers slower than `shared_timeout` (50 ms
//!   unless set), the local state decides, and the global listener hears
//!   [`Event::SharedUnavailable`](crate::events::Event) once per outage (and
//!   `SharedRestored` at its end). The local breaker and gates mirror every call, so they
//!   decide from what this instance did, a shared gate at the declared rate divided by the
//!   instances Redis last said use it ([`Event::GateShare`](crate::events::Event), once per
//!   outage), a shared window from this instance's calls; one background task per store
//!   reconnects with jittered backoff and, once Redis answers again, re-syncs (openings Redis
//!   holds are applied here, openings made here meanwhile are published). `shared_fail = "closed"`
//!   refuses instead ([`Rejected::SharedUnavailable`](crate::Rejected)): for the rare limit
//!   that must never be exceeded, at the price of refusing every call while Redis is down.
//! - **TLS** (feature `redis-tls`): `rediss://` URLs, verified against the system's roots or
//!   [`RedisBuilder::ca_file`], with [`RedisBuilder::client_cert`] for mutual TLS. A refused
//!   handshake is said (the event's reason, and [`Redis::last_error`]) with its fix.
//! - **Redis Cluster** ([`Redis::cluster`]): each script runs on the node that holds its hash
//!   tag. A dead node's breakers and gates decide locally until it answers or the cluster
//!   fails over (the node is skipped 1 s, doubling to 8 s, rather than waited on at every
//!   call), said once per node as the store `"{nodes} node {host:port}"`; the others keep
//!   sharing and the store stays available. A node that does not answer within
//!   `shared_timeout` is skipped alike, whichever timer (the store's, or resil's own around
//!   [`SharedStore::reserve`] and [`SharedStore::acquire_probe`]) fires first: the store knows
//!   the node of the call that was late, so [`SharedStore::timed_out`] does not take the whole
//!   cluster for down. News is heard on one node (a cluster broadcasts every PUBLISH), and on
//!   the next one listed when it goes.
//! - **Operators.** [`Breaker::force_open`](crate::Breaker::force_open) and
//!   [`Breaker::reset`](crate::Breaker::reset) act on this instance only (its admin
//!   endpoint), and a breaker forced open ignores what peers publish until it is reset.
//!
//! ```no_run
//! use resil_runtime::shared::Redis;
//! use resil_runtime::Policy;
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! Redis::connect("redis://127.0.0.1:6379/").await?;
//! let policy = Policy::builder()
//!     .name("llm::complete")
//!     .breaker_named("openai", 5, Duration::from_secs(30))
//!     .rate(600, Duration::from_secs(60), 600)
//!     .shared()
//!     .build()?;
//! # let _ = policy; Ok(()) }
//! ```

#[cfg(feature = "redis")]
mod breaker;
#[cfg(feature = "redis")]
mod builder;
#[cfg(any(test, feature = "conformance"))]
#[cfg_attr(docsrs, doc(cfg(feature = "conformance")))]
pub mod conformance;
#[cfg(feature = "redis")]
mod gate;
#[cfg(feature = "redis")]
mod listed;
mod memory;
mod policy;
#[cfg(feature = "redis")]
mod scripts;
#[cfg(feature = "redis")]
mod store;
#[cfg(feature = "redis")]
mod target;
#[cfg(feature = "redis-tls")]
mod tls;

pub use crate::seams::{
    Announcement, Ask, BreakerLink, BreakerNews, Change, GateLink, GateNews, Probe, Reservation,
    Reserved, SharedStore, Slot, StoreFuture, Unavailable, WindowBatch, WindowSums,
};
#[cfg(feature = "redis")]
pub use builder::RedisBuilder;
pub use memory::InMemory;
pub use policy::IntoSharedStore;

#[cfg(feature = "redis")]
use store::Store;

#[cfg(feature = "redis")]
use std::fmt;
#[cfg(feature = "redis")]
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// `shared_timeout` unless set: 50 ms.
#[deprecated(
    since = "0.1.1",
    note = "unused by resil: the default, 50 ms, is documented on `PolicyBuilder::shared_timeout`"
)]
pub const DEFAULT_TIMEOUT: Duration = resil_spec::defaults::SHARED_TIMEOUT;

#[cfg(feature = "redis")]
/// A Redis store for shared state: a connection, a subscription to the breakers' channel,
/// and the task that keeps both up.
///
/// Clone it freely: clones are the same store. The store's task runs on the tokio runtime
/// that connected it; a store made by [`Redis::open`] stops it when the last clone (and every
/// policy using it) is dropped, the process's store lives as long as the process.
///
/// ```no_run
/// use resil_runtime::shared::Redis;
///
/// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
/// let store = Redis::connect("redis://127.0.0.1:6379/").await?;
/// if !store.is_available() {
///     eprintln!("Redis is not answering: shared policies decide locally until it does");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redis {
    store: Arc<Store>,
}

#[cfg(feature = "redis")]
impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.store.url())
            .field("instance", &self.store.instance())
            .field("available", &self.store.is_available())
            .finish()
    }
}

#[cfg(feature = "redis")]
/// Why a store could not be made.
///
/// ```
/// use resil_runtime::shared::{Redis, SharedError};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let refused = Redis::open("http://127.0.0.1/").await;
/// assert!(matches!(refused, Err(SharedError::Url { .. })));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharedError {
    /// The URL is not a Redis URL resil can use.
    #[error("`{url}` cannot be used as a Redis URL ({reason}): write it as redis://host:port/, redis://:password@host:port/db, or rediss://host:port/ for TLS (resil's feature `redis-tls`)")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// What the client said.
        reason: String,
    },
    /// A TLS file ([`RedisBuilder::ca_file`], [`RedisBuilder::client_cert`]) is missing or
    /// does not parse.
    #[error("the TLS file `{path}` cannot be used: {reason}")]
    Tls {
        /// The file's path.
        path: String,
        /// What is wrong with it, and the fix.
        reason: String,
    },
    /// No tokio runtime to run the store's task on, or one without its IO or time driver.
    #[error("resil::shared::Redis must be connected from inside a tokio runtime with its IO and time drivers (`#[tokio::main]`, or `Builder::enable_all()`): its task keeps the connection up")]
    NoRuntime,
}

#[cfg(feature = "redis")]
impl Redis {
    /// Opens a store at `url` and installs it as the process's: every policy declared
    /// `shared = true` keeps its state there, including policies built before this call (they
    /// decided locally until then). A second call points the process's store at a new URL.
    ///
    /// An unreachable server is not an error: the service starts, its policies decide locally
    /// (fail-open), and the store connects as soon as Redis answers. A malformed URL is.
    pub async fn connect(url: &str) -> Result<Redis, SharedError> {
        Redis::builder(url).connect().await
    }

    /// Opens a store at `url` without installing it: for a policy built with
    /// [`PolicyBuilder::shared_in`](crate::PolicyBuilder::shared_in), such as two instances
    /// simulated in one process, each with its own store.
    pub async fn open(url: &str) -> Result<Redis, SharedError> {
        Redis::builder(url).open().await
    }

    /// The store [`Redis::connect`] installed, if any.
    pub fn installed() -> Option<Redis> {
        let store = global();
        store.is_attached().then(|| Redis {
            store: Arc::clone(store),
        })
    }

    /// Whether Redis answers now (false during an outage, while policies fail open).
    pub fn is_available(&self) -> bool {
        self.store.is_available()
    }

    /// Why the store, or a cluster node, does not answer now, as the
    /// [`Event::SharedUnavailable`](crate::events::Event) said it (a refused certificate
    /// names its fix: `ca_file`, the host name, `client_cert`); `None` while everything
    /// answers. The latest failure's reason, cleared when Redis answers again.
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// let store = Redis::builder("rediss://redis.internal:6380/").connect().await?;
    /// if let Some(reason) = store.last_error() {
    ///     eprintln!("deciding locally: {reason}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn last_error(&self) -> Option<String> {
        self.store.last_error()
    }

    /// This instance's random id, carried by what it publishes (it ignores its own messages).
    pub fn instance(&self) -> &str {
        self.store.instance()
    }
}

#[cfg(feature = "redis")]
/// The process's store, as policies declared `shared = true` see it: it exists before
/// [`Redis::connect`] attaches it to a server, so a policy built first is bound to it too.
pub(crate) fn global() -> &'static Arc<Store> {
    static GLOBAL: OnceLock<Arc<Store>> = OnceLock::new();
    GLOBAL.get_or_init(Store::new)
}
