//! [`RetryBudget`]: caps retries as a share of first attempts, across operations.

use std::time::Duration;

use tokio::time::Instant;

use crate::ConfigError;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const BUCKETS: usize = 10;
const WINDOW: Duration = Duration::from_secs(10);
const BUCKET_NANOS: u64 = (WINDOW.as_nanos() / BUCKETS as u128) as u64;

/// Over a sliding 10-second window, retries may add at most `ratio` to the first attempts
/// (plus `min_per_sec` retries per second, if given). Beyond it, a retry is not made and the
/// operation ends with its last error.
///
/// Why a budget and not only a retry count: `retry = 2` triples the load on a provider that
/// fails every call, and a breaker only opens after consecutive failures. A provider failing
/// 30 % of calls never opens a breaker, yet every failure costs up to two more calls. A 20 %
/// budget bounds the extra load at 20 %, whatever the failure rate (the idea of Finagle's and
/// Envoy's retry budgets).
///
/// Counting is lock-free: first attempts and retries go into ten one-second buckets of
/// atomics; a retry checks the sums.
///
/// ```
/// use resil_runtime::RetryBudget;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), resil_runtime::ConfigError> {
/// let budget = RetryBudget::new(0.2, 0.0)?;
/// for _ in 0..10 {
///     budget.record_first_attempt();
/// }
/// assert!(budget.try_withdraw());
/// assert!(budget.try_withdraw());
/// assert!(!budget.try_withdraw(), "2 retries for 10 first attempts is 20 %");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    min_per_sec: f64,
    origin: Instant,
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Default)]
struct Bucket {
    /// Which 1-second slot since `origin` the counts belong to.
    slot: AtomicU64,
    firsts: AtomicU32,
    retries: AtomicU32,
}

impl RetryBudget {
    /// Retries may add `ratio` (0.2 for 20 %) to first attempts, plus `min_per_sec` per
    /// second so that a quiet service can still retry.
    pub fn new(ratio: f64, min_per_sec: f64) -> Result<Self, ConfigError> {
        if !(ratio.is_finite() && ratio >= 0.0 && min_per_sec.is_finite() && min_per_sec >= 0.0) {
            return Err(ConfigError::InvalidRetryBudget);
        }
        Ok(RetryBudget {
            ratio,
            min_per_sec,
            origin: Instant::now(),
            buckets: Default::default(),
        })
    }

    /// The share of first attempts retries may add.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Counts an operation's first attempt.
    pub fn record_first_attempt(&self) {
        self.bucket(self.slot_now())
            .firsts
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget; false when the window has none left.
    pub fn try_withdraw(&self) -> bool {
        let now = self.slot_now();
        let (firsts, retries) = self.totals(now);
        let allowed = self.ratio * f64::from(firsts) + self.min_per_sec * WINDOW.as_secs_f64();
        if f64::from(retries) + 1.0 > allowed + 1e-9 {
            return false;
        }
        self.bucket(now).retries.fetch_add(1, Ordering::Relaxed);
        true
    }

    fn slot_now(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.origin)
            .as_nanos() as u64
            / BUCKET_NANOS
    }

    /// The bucket for `slot`, emptied first if it still holds an older slot's counts.
    fn bucket(&self, slot: u64) -> &Bucket {
        let bucket = &self.buckets[(slot % BUCKETS as u64) as usize];
        let seen = bucket.slot.load(Ordering::Acquire);
        if seen != slot
            && bucket
                .slot
                .compare_exchange(seen, slot, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            bucket.firsts.store(0, Ordering::Relaxed);
            bucket.retries.store(0, Ordering::Relaxed);
        }
        bucket
    }

    fn totals(&self, now: u64) -> (u32, u32) {
        self.buckets
            .iter()
            .filter(|bucket| {
                now.saturating_sub(bucket.slot.load(Ordering::Acquire)) < BUCKETS as u64
            })
            .fold((0, 0), |(firsts, retries), bucket| {
                (
                    firsts + bucket.firsts.load(Ordering::Relaxed),
                    retries + bucket.retries.load(Ordering::Relaxed),
                )
            })
    }
}
