//! The builder's methods that keep a policy's state in Redis: they know the stores, so they
//! live here, above the policy, which holds only the seam.

use std::sync::Arc;
use std::time::Duration;

use super::{global, Redis};
use crate::policy::PolicyBuilder;
use crate::seams::SharedStore;

/// The process's store, as the seam a policy holds.
fn process() -> Arc<dyn SharedStore> {
    Arc::clone(global()) as Arc<dyn SharedStore>
}

impl<K> PolicyBuilder<K> {
    /// Keeps the breaker and rate gates in the process's Redis store (installed by
    /// [`Redis::connect`]), shared with every instance of the service: see
    /// [`crate::shared`]. Until a store is connected, the policy decides locally.
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared(mut self) -> Self {
        self.sharing(process).store = process();
        self
    }

    /// [`PolicyBuilder::shared`], in `store` rather than the process's: for two instances
    /// simulated in one process, or state kept apart from the rest.
    ///
    /// ```no_run
    /// use resil_runtime::{shared::Redis, Breaker, BreakerConfig, Policy};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Redis::open("redis://127.0.0.1:6379/").await?;
    /// let breaker = Arc::new(Breaker::new("provider", BreakerConfig::default()));
    /// let policy = Policy::builder()
    ///     .breaker(breaker)
    ///     .rate(10, Duration::from_secs(1), 10)
    ///     .shared_in(&store)
    ///     .shared_timeout(Duration::from_millis(20))
    ///     .build()?;
    /// # let _ = policy; Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared_in(mut self, store: &Redis) -> Self {
        let store = Arc::clone(&store.store) as Arc<dyn SharedStore>;
        let sharing = self.sharing(|| Arc::clone(&store));
        sharing.store = store;
        self
    }

    /// How long a call waits for Redis before its local state decides (50 ms unless set; at
    /// most 1 s). Makes the policy shared.
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared_timeout(mut self, timeout: Duration) -> Self {
        self.sharing(process).timeout = timeout;
        self
    }

    /// When Redis does not answer, refuse calls with [`Rejected::SharedUnavailable`]
    /// (`shared_fail = "closed"`) instead of letting the local state decide: for a limit that
    /// must never be exceeded. Makes the policy shared.
    ///
    /// [`Rejected::SharedUnavailable`]: crate::Rejected::SharedUnavailable
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn shared_fail_closed(mut self, fail_closed: bool) -> Self {
        self.sharing(process).fail_closed = fail_closed;
        self
    }
}
