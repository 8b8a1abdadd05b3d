//! What makes one model's provider unlike the others: a quota of completions, and a slow
//! tail of first tokens. Apart from the server itself, which is long enough already.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use super::{MockProvider, State};

/// A quota and a slow tail, both off unless asked for.
#[derive(Debug, Default)]
pub(super) struct Quirks {
    /// Completions served before every further one is answered 429 (0: no quota).
    quota: u32,
    /// Completion requests counted against the quota so far.
    asked: AtomicU32,
    /// Every how many generations one is slow to its first token (0: none is).
    slow_every: AtomicU32,
    /// How long a slow one waits before its first token, in milliseconds.
    slow_ms: AtomicU64,
    /// Generations started so far, counted for the slow tail.
    generated: AtomicU32,
}

impl Quirks {
    /// Counts a completion request against the quota: whether it is past it.
    pub(super) fn over_quota(&self) -> bool {
        self.quota > 0 && self.asked.fetch_add(1, Ordering::SeqCst) >= self.quota
    }

    /// What a generation starting now waits before its first token: the slow tail's wait
    /// for every `slow_every`-th, nothing for the others. By count, not by chance, so that a
    /// run's tail is the same every time.
    pub(super) fn first_token_wait(&self) -> Duration {
        let every = self.slow_every.load(Ordering::SeqCst);
        let generated = self.generated.fetch_add(1, Ordering::SeqCst) + 1;
        if every > 0 && generated % every == 0 {
            Duration::from_millis(self.slow_ms.load(Ordering::SeqCst))
        } else {
            Duration::ZERO
        }
    }
}

impl MockProvider {
    /// Starts with a quota: the first `quota` completion requests are served (any number at
    /// once), every later one is answered 429 with `Retry-After: retry_after_secs`, as a
    /// provider answers once an account's requests for the minute are used up.
    pub async fn with_quota(quota: u32, retry_after_secs: u64) -> std::io::Result<Self> {
        Self::serve(State {
            capacity: u32::MAX,
            retry_after_secs,
            quirks: Quirks {
                quota,
                ..Quirks::default()
            },
            ..State::default()
        })
        .await
    }

    /// From now on, every `every`-th answer generated (the 10th, 20th, ... for 10) waits
    /// `first_token` before its first token; its other tokens come as the request asked.
    pub fn slow_tail(&self, every: u32, first_token: Duration) {
        let quirks = &self.state.quirks;
        let millis = u64::try_from(first_token.as_millis()).unwrap_or(u64::MAX);
        quirks.slow_ms.store(millis, Ordering::SeqCst);
        quirks.slow_every.store(every, Ordering::SeqCst);
    }
}
