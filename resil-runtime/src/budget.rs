//! [`RetryBudget`]: caps retries as a share of first attempts, across operations.

use std::time::Duration;

use tokio::time::Instant;

use crate::ConfigError;
use resil_spec::rules;
use std::sync::atomic::{AtomicU64, Ordering};

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
/// Counting is lock-free: first attempts and retries go into ten one-second buckets, one
/// atomic word each; a retry checks the sums.
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
    buckets: [AtomicU64; BUCKETS],
}

/// One bucket's counts in one word, so that emptying a stale bucket and counting into it, or
/// checking the budget and taking a retry from it, is one compare-and-swap: no increment is
/// lost and no two callers take the last retry. Bits 0-20 the first attempts, 21-41 the
/// retries (each saturating at two million a second), 42-63 the bucket's slot (wrapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts(u64);

const COUNT_MASK: u64 = (1 << 21) - 1;
const SLOT_MASK: u64 = (1 << 22) - 1;

impl Counts {
    fn new(slot: i64, firsts: u64, retries: u64) -> Self {
        Counts(
            (slot as u64 & SLOT_MASK) << 42
                | retries.min(COUNT_MASK) << 21
                | firsts.min(COUNT_MASK),
        )
    }

    fn slot(self) -> u64 {
        self.0 >> 42
    }

    fn firsts(self) -> u64 {
        self.0 & COUNT_MASK
    }

    fn retries(self) -> u64 {
        self.0 >> 21 & COUNT_MASK
    }

    /// The counts as of `slot`: a bucket last written in another second starts empty.
    fn at(self, slot: i64) -> Counts {
        if self.slot() == slot as u64 & SLOT_MASK {
            self
        } else {
            Counts::new(slot, 0, 0)
        }
    }

    /// Does this bucket belong to the window ending at `slot`?
    fn in_window(self, slot: i64) -> bool {
        ((slot as u64).wrapping_sub(self.slot()) & SLOT_MASK) < BUCKETS as u64
    }
}

impl RetryBudget {
    /// Retries may add `ratio` (0.2 for 20 %) to first attempts, plus `min_per_sec` per
    /// second so that a quiet service can still retry.
    pub fn new(ratio: f64, min_per_sec: f64) -> Result<Self, ConfigError> {
        rules::retry_budget(ratio, min_per_sec)?;
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
        let slot = self.slot_now();
        let bucket = self.bucket(slot);
        let mut seen = Counts(bucket.load(Ordering::Acquire));
        loop {
            let now = seen.at(slot);
            let counted = Counts::new(slot, now.firsts() + 1, now.retries());
            match bucket.compare_exchange_weak(
                seen.0,
                counted.0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => seen = Counts(actual),
            }
        }
    }

    /// Takes one retry from the budget; false when the window has none left.
    ///
    /// Exact within a one-second bucket (the check and the withdrawal are one
    /// compare-and-swap); callers racing across a bucket boundary may each see the other's
    /// second as it was, so the window can overshoot by at most one retry per such caller.
    pub fn try_withdraw(&self) -> bool {
        let slot = self.slot_now();
        let bucket = self.bucket(slot);
        let (other_firsts, other_retries) = self
            .buckets
            .iter()
            .filter(|other| !std::ptr::eq(*other, bucket))
            .map(|other| Counts(other.load(Ordering::Acquire)))
            .filter(|counts| counts.in_window(slot))
            .fold((0, 0), |(firsts, retries), counts| {
                (firsts + counts.firsts(), retries + counts.retries())
            });
        let mut seen = Counts(bucket.load(Ordering::Acquire));
        loop {
            let now = seen.at(slot);
            let firsts = (other_firsts + now.firsts()) as f64;
            let retries = (other_retries + now.retries()) as f64;
            let allowed = self.ratio * firsts + self.min_per_sec * WINDOW.as_secs_f64();
            if retries + 1.0 > allowed + 1e-9 {
                return false;
            }
            let taken = Counts::new(slot, now.firsts(), now.retries() + 1);
            match bucket.compare_exchange_weak(seen.0, taken.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => seen = Counts(actual),
            }
        }
    }

    /// Seconds since `origin`, signed: a budget shared by two runtimes (two paused test
    /// clocks) may see instants before its origin. Those seconds still advance, and buckets
    /// written on the other clock fall out of the window (their slots are not within the last
    /// ten) instead of counting forever.
    fn slot_now(&self) -> i64 {
        let now = Instant::now();
        let slots = |d: Duration| i64::try_from(d.as_nanos() / u128::from(BUCKET_NANOS));
        match now.checked_duration_since(self.origin) {
            Some(after) => slots(after).unwrap_or(i64::MAX),
            None => slots(self.origin - now).map_or(i64::MIN, |before| -before - 1),
        }
    }

    fn bucket(&self, slot: i64) -> &AtomicU64 {
        &self.buckets[slot.rem_euclid(BUCKETS as i64) as usize]
    }
}
