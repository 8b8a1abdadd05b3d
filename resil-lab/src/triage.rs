//! Triage: a provider answering 401. Retrying everything makes 6 attempts over 6.3 s and
//! still gets 401; asking the error whether it is worth retrying makes one request.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use resil::{Jitter, Policy, Rejected, Transient};
use tokio::time::Instant;

/// What the original measured for retry-everything.
pub const ORIGINAL: &str =
    "retry-everything: 6 attempts, 6.3 s, still 401; Transient: 1 request, a few ms";

/// What a naive client thinks: every failure is worth another try.
#[derive(Debug)]
struct RetryEverything(Result<http::StatusCode, Rejected>);

impl Transient for RetryEverything {
    fn is_transient(&self) -> bool {
        true
    }
}

impl From<Rejected> for RetryEverything {
    fn from(rejected: Rejected) -> Self {
        RetryEverything(Err(rejected))
    }
}

/// What resil's classification says: the status decides (401 is permanent).
#[derive(Debug)]
struct Classified(Result<http::StatusCode, Rejected>);

impl Transient for Classified {
    fn is_transient(&self) -> bool {
        match &self.0 {
            Ok(status) => status.is_transient(),
            Err(rejected) => rejected.is_transient(),
        }
    }
}

impl From<Rejected> for Classified {
    fn from(rejected: Rejected) -> Self {
        Classified(Err(rejected))
    }
}

/// One client's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Requests sent.
    pub requests: u32,
    /// Time until the caller got its answer.
    pub elapsed: Duration,
    /// The status it ended with.
    pub status: u16,
}

impl Outcome {
    /// One JSON object, naming the client.
    pub fn json(&self, client: &str) -> serde_json::Value {
        serde_json::json!({
            "client": client,
            "requests": self.requests,
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "status": self.status,
        })
    }
}

/// Both clients against the same 401, 15 ms per request.
pub async fn run() -> (Outcome, Outcome) {
    let policy = |seed| {
        Policy::builder()
            .retry(5)
            .backoff(Duration::from_millis(200), Duration::from_secs(8))
            .jitter(Jitter::None)
            .seed(seed)
            .build()
            .expect("valid policy")
    };
    let requests = AtomicU32::new(0);
    let unauthorized = || async {
        requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(15)).await;
        http::StatusCode::UNAUTHORIZED
    };

    let started = Instant::now();
    let naive = policy(1)
        .run(|| async { Err::<(), _>(RetryEverything(Ok(unauthorized().await))) })
        .await
        .unwrap_err();
    let naive = Outcome {
        requests: requests.swap(0, Ordering::Relaxed),
        elapsed: started.elapsed(),
        status: naive.0.map_or(0, |s| s.as_u16()),
    };

    let started = Instant::now();
    let classified = policy(2)
        .run(|| async { Err::<(), _>(Classified(Ok(unauthorized().await))) })
        .await
        .unwrap_err();
    let classified = Outcome {
        requests: requests.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        status: classified.0.map_or(0, |s| s.as_u16()),
    };
    (naive, classified)
}
