//! What the builder needs to share a policy's state with other instances: the attribute's
//! `shared = true`, and the sharing the store's own methods (`crate::shared`) declare.

#[cfg(feature = "shared")]
use std::sync::Arc;
use std::time::Duration;

use super::PolicyBuilder;

impl<K, C> PolicyBuilder<K, C> {
    /// What `shared = true` expands to; without the `redis` feature the attribute is refused
    /// at compile time before this is reached, so it changes nothing then.
    #[doc(hidden)]
    pub fn __shared(self, timeout: Option<Duration>, fail_closed: bool) -> Self {
        #[cfg(feature = "redis")]
        {
            let builder = self.shared().shared_fail_closed(fail_closed);
            match timeout {
                Some(timeout) => builder.shared_timeout(timeout),
                None => builder,
            }
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = (timeout, fail_closed);
            self
        }
    }

    /// How the policy shares its state, declared shared in `store` unless it was already:
    /// for the methods that make a policy shared (`crate::shared` adds them), which know the
    /// stores.
    #[cfg(feature = "shared")]
    pub(crate) fn sharing(
        &mut self,
        store: impl FnOnce() -> Arc<dyn crate::seams::SharedStore>,
    ) -> &mut crate::seams::Sharing {
        self.shared.get_or_insert_with(|| crate::seams::Sharing {
            store: store(),
            timeout: resil_spec::defaults::SHARED_TIMEOUT,
            fail_closed: false,
            heard: heard_elsewhere,
        })
    }
}

/// A transition of a shared breaker that a peer caused: no call of this instance hears of it,
/// so the global listeners do here.
#[cfg(feature = "shared")]
fn heard_elsewhere(breaker: &dyn crate::seams::Linked, transition: crate::breaker::Transition) {
    let (name, label, key) = breaker.names();
    let breaker = crate::events::BreakerName { name, label, key };
    crate::events::breaker_transition(crate::events::resolve(None), breaker, transition);
}
