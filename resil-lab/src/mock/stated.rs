//! A limit the provider states on every answer, as OpenAI does: completions counted in fixed
//! windows, each answer (a success or a 429) carrying `x-ratelimit-limit-requests`,
//! `x-ratelimit-remaining-requests` and `x-ratelimit-reset-requests`, and the ones past the
//! limit answered 429 with `retry-after-ms` and `Retry-After`. Apart from the server itself,
//! which is long enough already.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Request};
use hyper::body::Incoming;

use super::{completions, too_many_requests, Body, MockProvider, State};

/// Completions counted in fixed windows from the server's start.
#[derive(Debug)]
pub(super) struct Stated {
    /// Completions allowed per window.
    limit: AtomicU64,
    /// The windows' length.
    window: Duration,
    /// When window 0 began: the server's start.
    origin: Instant,
    /// The current window and the ones before it.
    counted: Mutex<Counted>,
}

/// The latest window that counted a request, and the capacity of the windows before it.
#[derive(Debug, Default)]
struct Counted {
    /// Its index from the server's start.
    index: u128,
    /// Completions it counted so far.
    count: u64,
    /// Its limit: the one in force when it began, or the latest set while it ran.
    limit: u64,
    /// Completions the windows before it could serve (see [`MockProvider::stated_capacity`]).
    before: u64,
}

impl Counted {
    /// What this window could serve: its limit, or what it served if more (the limit
    /// lowered after it had served more).
    fn capacity(&self) -> u64 {
        self.limit.max(self.count)
    }
}

/// What the provider decided for one request, and what it says of its limit.
struct Verdict {
    allowed: bool,
    limit: u64,
    /// Completions left in the window after this one.
    remaining: u64,
    /// Until the window ends.
    reset: Duration,
}

impl Stated {
    fn new(limit: u64, window: Duration) -> Self {
        assert!(!window.is_zero(), "a window of some length");
        Stated {
            limit: AtomicU64::new(limit),
            window,
            origin: Instant::now(),
            counted: Mutex::new(Counted {
                limit,
                ..Counted::default()
            }),
        }
    }

    /// Counts a completion request in its window, if the window has room for it.
    fn count(&self) -> Verdict {
        let elapsed = self.origin.elapsed().as_nanos();
        let window = self.window.as_nanos();
        let (index, into) = (elapsed / window, elapsed % window);
        // Below a window's length: fits in u64 nanoseconds for any window up to 584 years.
        let reset = Duration::from_nanos((window - into) as u64);
        let mut counted = self.counted();
        // Read under the lock: a limit set meanwhile applies to this window as a whole.
        let limit = self.limit.load(Ordering::SeqCst);
        // A request timed just before another that took the lock first and began a window
        // is counted in that window.
        if index > counted.index {
            // Windows without a request in between could each serve the limit.
            let skipped = u64::try_from(index - counted.index - 1).unwrap_or(u64::MAX);
            counted.before = counted
                .before
                .saturating_add(counted.capacity())
                .saturating_add(skipped.saturating_mul(limit));
            counted.index = index;
            counted.count = 0;
            counted.limit = limit;
        }
        let allowed = counted.count < limit;
        if allowed {
            counted.count += 1;
        }
        Verdict {
            allowed,
            limit,
            remaining: limit.saturating_sub(counted.count),
            reset,
        }
    }

    fn counted(&self) -> std::sync::MutexGuard<'_, Counted> {
        self.counted
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn index(&self) -> u128 {
        self.origin.elapsed().as_nanos() / self.window.as_nanos()
    }
}

impl Verdict {
    /// OpenAI's three request headers (and for a 429 the waits) on `headers`.
    fn state(&self, headers: &mut HeaderMap) {
        headers.insert("x-ratelimit-limit-requests", self.limit.into());
        headers.insert("x-ratelimit-remaining-requests", self.remaining.into());
        let reset = HeaderValue::from_str(&go_duration(self.reset)).expect("ASCII");
        headers.insert("x-ratelimit-reset-requests", reset);
        if !self.allowed {
            let millis = ceil_millis(self.reset);
            headers.insert("retry-after-ms", millis.into());
            headers.insert(http::header::RETRY_AFTER, millis.div_ceil(1000).into());
        }
    }
}

/// A completion at a provider stating its limit: counted in its window and answered, or
/// answered 429 (not billed) past the limit; either way with the headers saying the limit.
pub(super) fn completions_stated(
    state: Arc<State>,
    stated: &Stated,
    request: Request<Incoming>,
) -> http::Response<Body> {
    let verdict = stated.count();
    let mut response = if verdict.allowed {
        completions(state, request)
    } else {
        too_many_requests(&state)
    };
    verdict.state(response.headers_mut());
    response
}

/// Whole milliseconds, rounded up: a wait said a little long is never too short.
fn ceil_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A duration as Go's `time.Duration.String` prints it (OpenAI's resets), to the millisecond
/// rounded up: `0s`, `450ms`, `1s`, `1.5s`, `1m30.25s`.
fn go_duration(duration: Duration) -> String {
    let millis = ceil_millis(duration);
    if millis == 0 {
        return "0s".to_owned();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let (hours, rest) = (millis / 3_600_000, millis % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    let seconds = match rest % 1000 {
        0 => format!("{}s", rest / 1000),
        fraction => {
            let fraction = format!("{fraction:03}");
            format!("{}.{}s", rest / 1000, fraction.trim_end_matches('0'))
        }
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, minutes) => format!("{minutes}m{seconds}"),
        (hours, minutes) => format!("{hours}h{minutes}m{seconds}"),
    }
}

impl State {
    /// Whether completions are counted against a stated limit.
    pub(super) fn stated(&self) -> Option<&Stated> {
        self.stated.as_ref()
    }
}

impl MockProvider {
    /// Starts stating its limit, as OpenAI does: at most `limit` completions in each fixed
    /// window of `window` (window k is `[k·window, (k+1)·window)` from the server's start, on
    /// the wall clock), any number at once. Every completion's answer, a success or a 429,
    /// carries `x-ratelimit-limit-requests: <limit>`, `x-ratelimit-remaining-requests: <left
    /// in the window after this one>` and `x-ratelimit-reset-requests: <until the window
    /// ends, as a Go duration: 450ms, 1s, 1.5s>`. Past the limit the answer is 429 with
    /// `retry-after-ms` (until the window ends) and `Retry-After` (the same in whole seconds,
    /// rounded up), counted in [`Stats::rate_limited`](super::Stats::rate_limited), not
    /// billed, and not counted in the window.
    pub async fn with_stated_limit(limit: u64, window: Duration) -> std::io::Result<Self> {
        Self::serve(State {
            capacity: AtomicU32::new(u32::MAX),
            retry_after_secs: 1,
            stated: Some(Stated::new(limit, window)),
            ..State::default()
        })
        .await
    }

    /// Changes the stated limit at once, for the current window too: lowered below what the
    /// window has already counted, the window's next completions are answered 429 (saying
    /// `0` remaining) until it ends. A provider started without
    /// [`MockProvider::with_stated_limit`] ignores it.
    pub fn set_stated_limit(&self, limit: u64) {
        if let Some(stated) = self.state.stated() {
            let mut counted = stated.counted();
            stated.limit.store(limit, Ordering::SeqCst);
            if counted.index == stated.index() {
                counted.limit = limit;
            }
        }
    }

    /// How many completions the stated limit let through from the start to the last window
    /// that counted a request: each window's limit (the latest set while it ran), or what
    /// it served if that was more (the limit lowered after it had served more). What a run
    /// ending in that window could have had: 40 over 4 windows of 10. 0 without a stated
    /// limit.
    pub fn stated_capacity(&self) -> u64 {
        self.state.stated().map_or(0, |stated| {
            let counted = stated.counted();
            counted.before.saturating_add(counted.capacity())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_print_as_go_durations() {
        let printed = |nanos| go_duration(Duration::from_nanos(nanos));
        assert_eq!(printed(0), "0s");
        assert_eq!(printed(1), "1ms");
        assert_eq!(printed(450_000_000), "450ms");
        assert_eq!(printed(449_000_001), "450ms");
        assert_eq!(printed(1_000_000_000), "1s");
        assert_eq!(printed(1_500_000_000), "1.5s");
        assert_eq!(printed(1_020_000_000), "1.02s");
        assert_eq!(printed(90_250_000_000), "1m30.25s");
        assert_eq!(printed(3_600_000_000_000), "1h0m0s");
    }
}
