//! The same flaky provider behind each built-in profile: 40 requests to a provider that
//! answers in 200 ms, fails one call in five, and is down for its calls 15 to 44 (an outage
//! of 30 calls); what each profile makes of it. On tokio's paused clock: no wall time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil::events::{Event, Listener};
use resil::profiles::{self, Profile};
use resil::{BreakerState, Policy};

use crate::LlmError;

/// What one profile did.
#[derive(Debug, Clone)]
pub struct Row {
    /// The profile.
    pub profile: &'static str,
    /// Requests answered, of 40.
    pub answered: u32,
    /// Calls that reached the provider.
    pub calls: u32,
    /// Time spent waiting between attempts, summed over the requests.
    pub waited: Duration,
    /// Times the breaker opened.
    pub trips: u32,
    /// The longest one request can take, by the profile's numbers (`None`: unbounded).
    pub worst_case: Option<Duration>,
}

/// Counts waits and breaker openings.
#[derive(Debug, Default)]
struct Tally {
    waited_ms: AtomicU32,
    trips: AtomicU32,
}

impl Listener for Tally {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::Waiting { wait, .. } => {
                self.waited_ms
                    .fetch_add(wait.as_millis() as u32, Ordering::Relaxed);
            }
            Event::BreakerTransition { transition, .. } if transition.to == BreakerState::Open => {
                self.trips.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// 40 requests through `profile`, one after another.
pub async fn run_one(profile: &'static Profile) -> Row {
    let tally = Arc::new(Tally::default());
    // Seeded: the jitter draws, and so the time waited, are the same on every run.
    let mut builder = Policy::builder()
        .name(profile.name)
        .profile(profile)
        .seed(1)
        .listener(tally.clone());
    if let Some(threshold) = profile.breaker_threshold {
        let cooldown = profile.breaker_cooldown.unwrap_or(Duration::from_secs(30));
        builder = builder.breaker_named(format!("profiles-{}", profile.name), threshold, cooldown);
    }
    let policy = builder.build().expect("the built-in profiles are valid");
    let calls = AtomicU32::new(0);
    let mut answered = 0;
    for _ in 0..40 {
        let result: Result<(), LlmError> = policy
            .run(|| async {
                let call = calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
                if (15..45).contains(&call) || call % 5 == 1 {
                    Err(LlmError::Unavailable)
                } else {
                    Ok(())
                }
            })
            .await;
        answered += u32::from(result.is_ok());
    }
    Row {
        profile: profile.name,
        answered,
        calls: calls.load(Ordering::Relaxed),
        waited: Duration::from_millis(tally.waited_ms.load(Ordering::Relaxed).into()),
        trips: tally.trips.load(Ordering::Relaxed),
        worst_case: policy.worst_case(),
    }
}

/// Every built-in profile, in turn.
pub async fn run() -> Vec<Row> {
    let mut rows = Vec::new();
    for profile in profiles::ALL {
        rows.push(run_one(profile).await);
    }
    rows
}

impl Row {
    /// One JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "profile": self.profile,
            "answered": self.answered,
            "calls": self.calls,
            "waited_ms": self.waited.as_millis() as u64,
            "trips": self.trips,
            "worst_case_ms": self.worst_case.map(|worst| worst.as_millis() as u64),
        })
    }
}

/// A lookup under the `fast` profile (3 s per attempt, one retry), against a provider that
/// never answers.
#[resil::resilient(profile = "fast", retry = 0)]
pub async fn lookup() -> Result<(), LlmError> {
    std::future::pending().await
}

/// How long [`lookup`] took to fail, before and after a configuration file changed its
/// timeout to 1 s (the file is written to a temporary directory and removed).
pub async fn reconfigured() -> std::io::Result<(Duration, Duration)> {
    let timed = || async {
        let started = tokio::time::Instant::now();
        let _ = lookup().await;
        started.elapsed()
    };
    let before = timed().await;
    let dir = std::env::temp_dir().join(format!("resil-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("resil.toml");
    std::fs::write(
        &path,
        "[\"resil_lab::profiles::lookup\"]\ntimeout = \"1s\"\n",
    )?;
    let applied = resil::config::load(&path).map_err(std::io::Error::other);
    std::fs::remove_dir_all(&dir)?;
    applied?;
    let after = timed().await;
    Ok((before, after))
}
