//! The builder's bulkhead: fixed or adaptive, shared or per key, with or without a queue.

use super::PolicyBuilder;
use crate::policy::Keyed;

/// How many operations the bulkhead lets in.
#[derive(Debug, Clone, Copy)]
pub(super) enum BulkheadSize {
    Fixed(usize),
    /// Adapting between these bounds.
    Adaptive(usize, usize),
}

impl<K, C> PolicyBuilder<K, C> {
    /// At most `limit` operations in flight; the next fails with
    /// [`crate::Rejected::BulkheadFull`].
    pub fn bulkhead(mut self, limit: usize) -> Self {
        self.bulkhead = Some(BulkheadSize::Fixed(limit));
        self
    }

    /// A bulkhead whose limit adapts between `min` and `max` to what the provider answers
    /// (`bulkhead = "adaptive 4..64"`): halved on a throttle, an attempt timeout or a
    /// transient failure, one more after as many successes as the limit, a tenth less when
    /// a round of answers slows down to twice its usual latency; see
    /// [`Bulkhead::adaptive`](crate::Bulkhead::adaptive).
    /// `build` refuses a `min` of 0 or above `max`.
    ///
    /// ```
    /// use resil_runtime::{ConfigError, Policy};
    ///
    /// let policy = Policy::builder().bulkhead_adaptive(4, 64).build()?;
    /// assert_eq!(policy.bulkhead().unwrap().adaptive_range(), Some((4, 64)));
    ///
    /// let empty = Policy::builder().bulkhead_adaptive(8, 4).build();
    /// assert_eq!(empty.unwrap_err(), ConfigError::AdaptiveBulkhead { min: 8, max: 4 });
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn bulkhead_adaptive(mut self, min: usize, max: usize) -> Self {
        self.bulkhead = Some(BulkheadSize::Adaptive(min, max));
        self
    }

    /// Lets up to `queue` callers wait, in order and within their deadline, for a place in
    /// the bulkhead instead of being rejected at once (see [`Bulkhead::with_queue`](crate::Bulkhead::with_queue)).
    pub fn bulkhead_queue(mut self, queue: usize) -> Self {
        self.bulkhead_queue = queue;
        self
    }
}

impl<C> PolicyBuilder<Keyed, C> {
    /// Each key gets its own bulkhead (and queue), as [`PolicyBuilder::bulkhead`] or
    /// [`PolicyBuilder::bulkhead_adaptive`] sets them; an adaptive one learns each key's
    /// limit apart.
    pub fn bulkhead_per_key(mut self) -> Self {
        self.per_key.bulkhead = true;
        self
    }
}
