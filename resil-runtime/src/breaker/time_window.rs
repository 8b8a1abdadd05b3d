//! [`TimeWindow`]: the calls of the last so long, for a failure-rate or slow-call breaker
//! with a window in time (`breaker_window = "30s"`).
//!
//! The calls are counted in a ring of buckets of about a second (at least 10, at most 60), as
//! Resilience4j's `TIME_BASED` window and Polly's `SamplingDuration` do, with running totals
//! beside them: recording and reading are O(1), and a bucket the clock has moved past is
//! subtracted once. A failure is forgotten when the ring has turned past its bucket, between
//! one bucket short of the window and the window after it.

use std::time::Duration;

use tokio::time::Instant;

/// The calls and bad calls of one bucket.
#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    calls: u32,
    bad: u32,
}

/// How many buckets a window of `window` has, and how long each lasts: a second a bucket
/// keeps the ring small and the ageing fine; 10 buckets at least make a short window age in
/// tenths, 60 at most keep a long one at 960 bytes. A shared window has the same buckets in
/// the store.
pub(crate) fn buckets(window: Duration) -> (u64, Duration) {
    let len = window.as_secs().clamp(10, 60);
    let width = u64::try_from(window.as_nanos() / u128::from(len)).unwrap_or(u64::MAX);
    (len, Duration::from_nanos(width))
}

/// The calls of the last `window`, in buckets, with their totals.
#[derive(Debug)]
pub(crate) struct TimeWindow {
    buckets: Box<[Bucket]>,
    /// How long one bucket lasts, in nanoseconds (at least one).
    width: u128,
    /// Bucket `n` covers `origin + n·width` to `origin + (n+1)·width`; it sits at `n % len`.
    origin: Instant,
    /// The newest bucket's number: buckets `head - len + 1 ..= head` are in the window.
    head: u64,
    calls: u32,
    bad: u32,
}

impl TimeWindow {
    /// An empty window of `window`, its buckets counted from `now`.
    pub(crate) fn new(window: Duration, now: Instant) -> Self {
        let (len, width) = buckets(window);
        let width = width.as_nanos().max(1);
        TimeWindow {
            buckets: vec![Bucket::default(); len as usize].into_boxed_slice(),
            width,
            origin: now,
            head: 0,
            calls: 0,
            bad: 0,
        }
    }

    /// Moves the window to `now`: the buckets it has passed are emptied and subtracted. After
    /// a pause as long as the window, that is every bucket, once; otherwise one per bucket
    /// width of time gone by, so the cost per call stays constant.
    fn advance(&mut self, now: Instant) {
        let number = now.saturating_duration_since(self.origin).as_nanos() / self.width;
        let number = u64::try_from(number).unwrap_or(u64::MAX);
        // A clock read before another caller took the lock: its call counts in the newest
        // bucket, a moment late rather than in the past.
        if number <= self.head {
            return;
        }
        let len = self.buckets.len() as u64;
        for passed in 1..=(number - self.head).min(len) {
            let slot = &mut self.buckets[((self.head + passed) % len) as usize];
            self.calls -= slot.calls;
            self.bad -= slot.bad;
            *slot = Bucket::default();
        }
        self.head = number;
    }

    /// Counts one call made at `now`.
    pub(crate) fn push(&mut self, now: Instant, bad: bool) {
        self.advance(now);
        let len = self.buckets.len() as u64;
        let slot = &mut self.buckets[(self.head % len) as usize];
        slot.calls = slot.calls.saturating_add(1);
        self.calls = self.calls.saturating_add(1);
        if bad {
            slot.bad = slot.bad.saturating_add(1);
            self.bad = self.bad.saturating_add(1);
        }
    }

    /// Whether at least `percent` % of the calls in the window at `now` were bad, with at
    /// least `min_calls` counted.
    pub(crate) fn trips(&mut self, now: Instant, percent: u8, min_calls: u32) -> bool {
        self.advance(now);
        super::config::trips(self.calls.into(), self.bad.into(), percent, min_calls)
    }

    /// Bad calls in the window at `now`.
    pub(crate) fn bad(&mut self, now: Instant) -> u32 {
        self.advance(now);
        self.bad
    }

    /// Forgets every call: the breaker starts judging afresh.
    pub(crate) fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
        self.calls = 0;
        self.bad = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn old_failures_age_out() {
        let mut window = TimeWindow::new(WINDOW, Instant::now());
        for _ in 0..6 {
            window.push(Instant::now(), true);
        }
        assert!(window.trips(Instant::now(), 50, 5));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(window.bad(Instant::now()), 6, "20 s later they still count");
        for _ in 0..4 {
            window.push(Instant::now(), false);
        }
        assert!(window.trips(Instant::now(), 50, 10), "6 bad of 10");
        tokio::time::advance(Duration::from_secs(11)).await;
        // 31 s after: the failures have aged out, the successes of 11 s ago have not.
        assert_eq!(window.bad(Instant::now()), 0);
        assert_eq!(window.calls, 4);
        assert!(!window.trips(Instant::now(), 1, 1));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(window.calls, 4, "reading is what moves the window");
        assert_eq!(window.bad(Instant::now()), 0);
        assert_eq!(window.calls, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_night_does_not_keep_them() {
        let mut window = TimeWindow::new(WINDOW, Instant::now());
        for _ in 0..20 {
            window.push(Instant::now(), true);
        }
        tokio::time::advance(Duration::from_secs(8 * 60 * 60)).await;
        // The first call of the morning is judged alone, not with the evening's 20 failures.
        window.push(Instant::now(), true);
        assert_eq!(window.bad(Instant::now()), 1);
        assert!(!window.trips(Instant::now(), 50, 10));
    }

    #[tokio::test(start_paused = true)]
    async fn each_bucket_leaves_once_the_ring_has_turned_past_it() {
        let mut window = TimeWindow::new(WINDOW, Instant::now());
        for _ in 0..30 {
            window.push(Instant::now(), true);
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        // One failure a second for 30 s: the first has just left, the other 29 are in.
        assert_eq!(window.bad(Instant::now()), 29);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(window.bad(Instant::now()), 19);
    }

    #[test]
    fn short_and_long_windows_have_10_to_60_buckets() {
        let now = Instant::now();
        let short = TimeWindow::new(Duration::from_secs(2), now);
        assert_eq!((short.buckets.len(), short.width), (10, 200_000_000));
        let long = TimeWindow::new(Duration::from_secs(600), now);
        assert_eq!((long.buckets.len(), long.width), (60, 10_000_000_000));
        let minute = TimeWindow::new(Duration::from_secs(45), now);
        assert_eq!((minute.buckets.len(), minute.width), (45, 1_000_000_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_read_before_the_last_counts_in_the_newest_bucket() {
        let start = Instant::now();
        let mut window = TimeWindow::new(WINDOW, start);
        tokio::time::advance(Duration::from_secs(5)).await;
        window.push(Instant::now(), true);
        window.push(start, true);
        assert_eq!(window.bad(Instant::now()), 2);
        // A breaker made under another (paused) clock may see instants before its origin.
        window.push(start - Duration::from_secs(1), false);
        assert_eq!(window.calls, 3);
    }
}
