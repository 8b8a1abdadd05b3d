//! The builder's methods that keep a policy's state in a shared store: they know the stores,
//! so they live here, above the policy, which holds only the seam.

use std::sync::Arc;
use std::time::Duration;

use super::InMemory;
use crate::policy::PolicyBuilder;
use crate::seams::SharedStore;

/// What [`PolicyBuilder::shared_in`] takes: a store, by reference or in an [`Arc`] (a
/// store of your own, or a wrapper around one of resil's).
///
/// ```
/// use resil_runtime::shared::{InMemory, IntoSharedStore, SharedStore};
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store: Arc<dyn SharedStore> = (&InMemory::new()).into_shared_store();
/// assert!(store.usable());
/// # }
/// ```
pub trait IntoSharedStore {
    /// The store, as the policies hold it.
    fn into_shared_store(self) -> Arc<dyn SharedStore>;
}

impl IntoSharedStore for Arc<dyn SharedStore> {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        self
    }
}

impl<S: SharedStore + 'static> IntoSharedStore for Arc<S> {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        self
    }
}

impl IntoSharedStore for InMemory {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        Arc::new(self)
    }
}

impl IntoSharedStore for &InMemory {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        Arc::new(self.clone())
    }
}

#[cfg(feature = "redis")]
impl IntoSharedStore for &super::Redis {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        Arc::clone(&self.store) as Arc<dyn SharedStore>
    }
}

#[cfg(feature = "redis")]
impl IntoSharedStore for super::Redis {
    fn into_shared_store(self) -> Arc<dyn SharedStore> {
        self.store
    }
}

/// The process's store, as the seam a policy holds.
#[cfg(feature = "redis")]
fn process() -> Arc<dyn SharedStore> {
    Arc::clone(super::global()) as Arc<dyn SharedStore>
}

impl<K, C> PolicyBuilder<K, C> {
    /// Keeps the breaker and rate gates in the process's Redis store (installed by
    /// [`Redis::connect`](super::Redis::connect)), shared with every instance of the service:
    /// see [`crate::shared`]. Until a store is connected, the policy decides locally.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared(mut self) -> Self {
        self.sharing(process).store = process();
        self
    }

    /// [`PolicyBuilder::shared`], in `store` rather than the process's: a
    /// [`Redis`](super::Redis) store of its own (two instances simulated in one process, or
    /// state kept apart from the rest), an [`InMemory`] store (state shared by the policies of
    /// one process, or tests), or a store of your own (see [`SharedStore`]).
    ///
    /// ```
    /// use resil_runtime::{shared::InMemory, Breaker, BreakerConfig, Policy};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = InMemory::new();
    /// let breaker = Arc::new(Breaker::new("provider", BreakerConfig::default()));
    /// let policy = Policy::builder()
    ///     .breaker(breaker)
    ///     .rate(10, Duration::from_secs(1), 10)
    ///     .shared_in(&store)
    ///     .shared_timeout(Duration::from_millis(20))
    ///     .build()?;
    /// # let _ = policy; Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
    pub fn shared_in(mut self, store: impl IntoSharedStore) -> Self {
        let store = store.into_shared_store();
        let sharing = self.sharing(|| Arc::clone(&store));
        sharing.store = store;
        self
    }

    /// How long a call waits for the shared store before its local state decides (50 ms
    /// unless set; at most 1 s). Makes the policy shared (in the process's Redis store,
    /// unless [`shared_in`](Self::shared_in) says another).
    #[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
    pub fn shared_timeout(mut self, timeout: Duration) -> Self {
        self.sharing(default_store).timeout = timeout;
        self
    }

    /// When the shared store does not answer, refuse calls with
    /// [`Rejected::SharedUnavailable`] (`shared_fail = "closed"`) instead of letting the
    /// local state decide: for a limit that must never be exceeded. Makes the policy shared
    /// (in the process's Redis store, unless [`shared_in`](Self::shared_in) says another).
    ///
    /// [`Rejected::SharedUnavailable`]: crate::Rejected::SharedUnavailable
    #[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
    pub fn shared_fail_closed(mut self, fail_closed: bool) -> Self {
        self.sharing(default_store).fail_closed = fail_closed;
        self
    }
}

/// The store of a policy made shared by its timeout or fail mode before (or without) a store:
/// the process's Redis store, or, without Redis, a store of its own in memory (the policy's
/// instances share nothing until `shared_in` says where).
fn default_store() -> Arc<dyn SharedStore> {
    #[cfg(feature = "redis")]
    {
        process()
    }
    #[cfg(not(feature = "redis"))]
    {
        Arc::new(InMemory::new())
    }
}
