//! A provider error type and a scripted provider shared by the runtime's tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use resil_runtime::events::{Event, Listener};
use resil_runtime::{Rejected, Transient};

/// `cases` cases per property, replaying first the failures kept in `regressions` (a file
/// under this crate's `tests/`) and keeping new ones there. Proptest's default looks for the
/// file beside the test's source and, in a workspace's tests, finds nothing ("failed to find
/// lib.rs or main.rs"): it would replay no failure found before.
pub fn proptest_config(cases: u32, regressions: &str) -> ProptestConfig {
    let path = format!("{}/tests/{regressions}", env!("CARGO_MANIFEST_DIR"));
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            path.into_boxed_str(),
        )))),
        ..ProptestConfig::default()
    }
}

/// A current-thread runtime of its own, its clock paused: for a property's cases and the
/// tests that need more than one runtime.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestError {
    Busy,
    BadRequest,
    /// A permanent error of this target only ("context too long for this model").
    TooLong,
    RetryAfter(Duration),
    /// A 429: "too fast", with the wait asked for.
    Throttled(Duration),
    Rejected(Rejected),
}

impl Transient for TestError {
    fn is_transient(&self) -> bool {
        match self {
            TestError::Busy | TestError::RetryAfter(_) | TestError::Throttled(_) => true,
            TestError::BadRequest | TestError::TooLong => false,
            TestError::Rejected(rejected) => rejected.is_transient(),
        }
    }
    fn is_throttle(&self) -> bool {
        matches!(self, TestError::Throttled(_))
    }
    fn moves_on(&self) -> bool {
        matches!(self, TestError::TooLong)
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            TestError::RetryAfter(wait) | TestError::Throttled(wait) => Some(*wait),
            TestError::Rejected(rejected) => rejected.retry_after(),
            _ => None,
        }
    }
}

impl From<Rejected> for TestError {
    fn from(rejected: Rejected) -> Self {
        TestError::Rejected(rejected)
    }
}

impl TestError {
    pub fn kind(&self) -> &'static str {
        match self {
            TestError::Busy => "busy",
            TestError::BadRequest => "bad_request",
            TestError::TooLong => "too_long",
            TestError::RetryAfter(_) => "retry_after",
            TestError::Throttled(_) => "throttled",
            TestError::Rejected(rejected) => rejected.kind(),
        }
    }
}

/// Counts calls and answers from a script, then with its last entry forever.
#[derive(Debug, Clone, Default)]
pub struct Provider {
    calls: Arc<AtomicU32>,
}

impl Provider {
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    pub async fn answer(&self, result: Result<u32, TestError>) -> Result<u32, TestError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        result
    }

    /// Never answers: only a timeout ends the call.
    pub async fn hang(&self) -> Result<u32, TestError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        std::future::pending().await
    }

    /// Answers after `delay`.
    pub async fn slow(
        &self,
        delay: Duration,
        result: Result<u32, TestError>,
    ) -> Result<u32, TestError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(delay).await;
        result
    }
}

/// Records every event as a line of text.
#[derive(Debug, Default)]
pub struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Recorder::default())
    }
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn waits(&self) -> Vec<Duration> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|line| line.strip_prefix("wait "))
            .map(|ns| Duration::from_nanos(ns.parse().unwrap()))
            .collect()
    }
}

impl Listener for Recorder {
    fn on_event(&self, event: &Event<'_>) {
        let line = match event {
            Event::AttemptStarted { attempt, .. } => format!("start {attempt}"),
            Event::AttemptEnded {
                attempt, outcome, ..
            } => format!("end {attempt} {outcome:?}"),
            Event::Waiting { wait, .. } => format!("wait {}", wait.as_nanos()),
            Event::Rejected { rejected, .. } => format!("rejected {}", rejected.kind()),
            Event::BreakerTransition {
                breaker,
                transition,
            } => {
                format!("breaker {breaker} {} -> {}", transition.from, transition.to)
            }
            Event::ConfigConflict { message, .. } => format!("conflict {message}"),
            Event::Routed { target, hedge, .. } => {
                format!("{} {target}", if *hedge { "hedge" } else { "route" })
            }
            Event::Skipped {
                target, rejected, ..
            } => format!("skip {target} {}", rejected.kind()),
            _ => format!("{event:?}"),
        };
        self.0.lock().unwrap().push(line);
    }
}

/// The calls each target of a route got, with when (milliseconds from a test's start).
#[derive(Default, Clone)]
pub struct TargetCalls(Arc<Mutex<Vec<(String, u128)>>>);

impl TargetCalls {
    pub fn record(&self, target: &str, start: tokio::time::Instant) {
        let at = start.elapsed().as_millis();
        self.0.lock().unwrap().push((target.to_owned(), at));
    }

    pub fn seen(&self) -> Vec<(String, u128)> {
        self.0.lock().unwrap().clone()
    }

    pub fn targets(&self) -> Vec<String> {
        self.seen().into_iter().map(|(target, _)| target).collect()
    }
}
