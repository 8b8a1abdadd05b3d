//! [`Backoff`]: how long to wait before each retry.
//!
//! Exponential growth spreads retries out in time; jitter spreads them out between clients,
//! so a thousand clients that failed together do not come back together. Full jitter (the
//! default) gives the fewest total calls for the same completion time; see the AWS
//! architecture blog's "Exponential Backoff And Jitter" for the measurements.

use std::time::Duration;

use rand::Rng;
pub use resil_spec::Jitter;
use resil_spec::{defaults, rules};

use crate::ConfigError;

/// Exponential backoff between `base` and `cap`, with jitter.
///
/// The wait before retry `n` (counting from 0) under full jitter is
/// `random(0, min(cap, base·2ⁿ))`. When the error carries a `retry_after()`, a policy waits
/// that long plus the draw (with `Jitter::None`, the longer of the two), so that clients given
/// the same `Retry-After` spread out instead of returning together.
///
/// ```
/// use resil_runtime::{Backoff, Jitter};
/// use rand::{rngs::SmallRng, SeedableRng};
/// use std::time::Duration;
///
/// let backoff = Backoff::new(Duration::from_millis(300), Duration::from_secs(8))?
///     .with_jitter(Jitter::None);
/// let mut rng = SmallRng::seed_from_u64(7);
/// assert_eq!(backoff.delay(0, None, &mut rng), Duration::from_millis(300));
/// assert_eq!(backoff.delay(2, None, &mut rng), Duration::from_millis(1200));
/// assert_eq!(backoff.delay(10, None, &mut rng), Duration::from_secs(8));
/// # Ok::<(), resil_runtime::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    /// `300ms..8s`, full jitter.
    fn default() -> Self {
        Backoff {
            base: defaults::BACKOFF_BASE,
            cap: defaults::BACKOFF_CAP,
            jitter: Jitter::Full,
        }
    }
}

impl Backoff {
    /// Waits from `base` growing ×2 per retry up to `cap`, with full jitter.
    pub fn new(base: Duration, cap: Duration) -> Result<Self, ConfigError> {
        rules::backoff(base, cap)?;
        Ok(Backoff {
            base,
            cap,
            jitter: Jitter::Full,
        })
    }

    /// The same envelope with another jitter.
    pub const fn with_jitter(self, jitter: Jitter) -> Self {
        Backoff { jitter, ..self }
    }

    /// The first wait's envelope.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest envelope.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base·2ⁿ)`: the longest wait before retry `n` (jitter only shortens it).
    pub fn envelope(&self, retry: u32) -> Duration {
        resil_spec::envelope(self.base, self.cap, retry)
    }

    /// The wait before retry `retry` (from 0). `previous` is the last wait, used by
    /// decorrelated jitter (`None` before the first retry).
    pub fn delay<R: Rng + ?Sized>(
        &self,
        retry: u32,
        previous: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let envelope = self.envelope(retry);
        match self.jitter {
            Jitter::None => envelope,
            Jitter::Full => uniform(rng, Duration::ZERO, envelope),
            Jitter::Equal => {
                let half = envelope / 2;
                half + uniform(rng, Duration::ZERO, envelope - half)
            }
            Jitter::Decorrelated => {
                let upper = previous
                    .unwrap_or(self.base)
                    .saturating_mul(3)
                    .clamp(self.base, self.cap);
                uniform(rng, self.base, upper)
            }
        }
    }
}

fn uniform<R: Rng + ?Sized>(rng: &mut R, low: Duration, high: Duration) -> Duration {
    // Past u64 nanoseconds (584 years) a wait is "never" anyway: saturate, never wrap.
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (low, high) = (nanos(low), nanos(high));
    Duration::from_nanos(rng.random_range(low..=high.max(low)))
}
