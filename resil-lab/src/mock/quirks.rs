//! What makes one model's provider unlike the others: a quota of completions, a slow tail of
//! first tokens, and no replays by `Idempotency-Key`. Apart from the server itself, which is
//! long enough already.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::{Answer, MockProvider, State};

/// A quota, a slow tail and no replays, all off unless asked for.
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
    /// Generations of new requests started so far, counted for the slow tail.
    generated: AtomicU32,
    /// Generations of repeats (an `Idempotency-Key` generated for before) started so far,
    /// counted for the slow tail apart from the new requests.
    repeated: AtomicU32,
    /// The keys generated for while the slow tail is on.
    seen: Mutex<HashSet<String>>,
    /// A known key is generated for anew, not replayed.
    no_replays: AtomicBool,
}

impl Quirks {
    /// Counts a completion request against the quota: whether it is past it.
    pub(super) fn over_quota(&self) -> bool {
        self.quota > 0 && self.asked.fetch_add(1, Ordering::SeqCst) >= self.quota
    }

    /// What a generation starting now for `key` waits before its first token: the slow
    /// tail's wait for every `slow_every`-th, nothing for the others. By count, not by
    /// chance, so that a run's tail is the same every time; a repeat of a request (its key
    /// generated for before: a hedge, or a retry) is counted apart from the new ones, every
    /// `slow_every`-th of them slow too. A hedge comes at a time of its own: counted with
    /// the new requests, it would shift which of them are slow by how the run went.
    pub(super) fn first_token_wait(&self, key: Option<&str>) -> Duration {
        let every = self.slow_every.load(Ordering::SeqCst);
        if every == 0 {
            return Duration::ZERO;
        }
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let repeat = key.is_some_and(|key| !seen.insert(key.to_owned()));
        drop(seen);
        let counter = if repeat {
            &self.repeated
        } else {
            &self.generated
        };
        if (counter.fetch_add(1, Ordering::SeqCst) + 1) % every == 0 {
            Duration::from_millis(self.slow_ms.load(Ordering::SeqCst))
        } else {
            Duration::ZERO
        }
    }
}

impl State {
    /// The answer to replay for `key`, if one was generated for it (and replays are on).
    pub(super) fn replay(&self, key: &str) -> Option<watch::Receiver<Answer>> {
        if self.quirks.no_replays.load(Ordering::SeqCst) {
            return None;
        }
        self.answers.lock().unwrap().get(key).cloned()
    }
}

impl MockProvider {
    /// Starts with a quota: the first `quota` completion requests are served (any number at
    /// once), every later one is answered 429 with `Retry-After: retry_after_secs`, as a
    /// provider answers once an account's requests for the minute are used up.
    pub async fn with_quota(quota: u32, retry_after_secs: u64) -> std::io::Result<Self> {
        Self::serve(State {
            capacity: AtomicU32::new(u32::MAX),
            retry_after_secs,
            quirks: Quirks {
                quota,
                ..Quirks::default()
            },
            ..State::default()
        })
        .await
    }

    /// From now on, every `every`-th answer generated for a new request (the 10th, 20th, ...
    /// for 10) waits `first_token` before its first token, and so does every `every`-th
    /// generated for a repeat (an `Idempotency-Key` generated for before); their other
    /// tokens come as the request asked.
    pub fn slow_tail(&self, every: u32, first_token: Duration) {
        let quirks = &self.state.quirks;
        let millis = u64::try_from(first_token.as_millis()).unwrap_or(u64::MAX);
        quirks.slow_ms.store(millis, Ordering::SeqCst);
        quirks.slow_every.store(every, Ordering::SeqCst);
    }

    /// From now on, a request whose `Idempotency-Key` is known is generated (and billed)
    /// anew, not replayed: a provider that does not deduplicate by key, as completion APIs
    /// mostly do not.
    pub fn no_replays(&self) {
        self.state.quirks.no_replays.store(true, Ordering::SeqCst);
    }
}
