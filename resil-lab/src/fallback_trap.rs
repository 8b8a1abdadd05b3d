//! The fallback trap: a primary model that always answers 503 and a healthy backup. With one
//! breaker shared by both models, the dead model's failures open the breaker that guards the
//! backup too; with one breaker per model, the dead one is cut off and the backup serves.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Transient};
use serde_json::json;

use crate::timeline::{Recording, Timeline};
use crate::LlmError;

/// The model that is down.
pub const PRIMARY: &str = "primary";
/// The model that works.
pub const BACKUP: &str = "backup";

/// What the original measured with the shared breaker.
pub const ORIGINAL: &str =
    "shared breaker: sequentially 30 calls to the dead model and 20 backoff waits; \
under load all 16 users failed though the backup was healthy";

/// Counts calls per model; the primary always fails after 50 ms.
#[derive(Debug, Default)]
pub struct Provider {
    primary: AtomicU32,
    backup: AtomicU32,
}

impl Provider {
    async fn call(&self, model: &str) -> Result<String, LlmError> {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if model == PRIMARY {
            self.primary.fetch_add(1, Ordering::Relaxed);
            Err(LlmError::Unavailable)
        } else {
            self.backup.fetch_add(1, Ordering::Relaxed);
            Ok(format!("{model}: answer"))
        }
    }
}

#[resilient(retry = 2, breaker = "fallback_trap_shared", breaker_threshold = 5)]
async fn ask_shared(model: &str, provider: &Provider) -> Result<String, LlmError> {
    provider.call(model).await
}

#[resilient(retry = 2, breaker = "per_model", breaker_threshold = 5)]
async fn ask_per_model(model: &str, provider: &Provider) -> Result<String, LlmError> {
    provider.call(model).await
}

/// Which breakers the client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakers {
    /// One breaker for both models.
    Shared,
    /// One breaker per model.
    PerModel,
}

impl Breakers {
    fn name(self) -> &'static str {
        match self {
            Breakers::Shared => "shared",
            Breakers::PerModel => "per_model",
        }
    }
}

/// One row: a load against one breaker layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Breaker layout.
    pub breakers: Breakers,
    /// `"sequential"` or `"parallel"`.
    pub load: &'static str,
    /// Calls to the dead model.
    pub primary_calls: u32,
    /// Calls to the backup.
    pub backup_calls: u32,
    /// Backoff waits spent on the dead model.
    pub waits: u32,
    /// Users who got an answer.
    pub answered: u32,
    /// Users who got an error.
    pub failed: u32,
}

impl Row {
    /// One JSON object.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "breakers": self.breakers.name(),
            "load": self.load,
            "primary_calls": self.primary_calls,
            "backup_calls": self.backup_calls,
            "waits": self.waits,
            "answered": self.answered,
            "failed": self.failed,
        })
    }
}

/// The primary first; on a transient error or a rejection, the backup.
async fn user(breakers: Breakers, provider: &Provider) -> (Result<String, LlmError>, bool) {
    let ask = |model| async move {
        match breakers {
            Breakers::Shared => ask_shared(model, provider).await,
            Breakers::PerModel => ask_per_model(model, provider).await,
        }
    };
    let before = provider.primary.load(Ordering::Relaxed);
    let result = match ask(PRIMARY).await {
        Err(error) if error.is_transient() || matches!(error, LlmError::Rejected(_)) => {
            ask(BACKUP).await
        }
        other => other,
    };
    (result, provider.primary.load(Ordering::Relaxed) > before)
}

async fn measure(
    breakers: Breakers,
    load: &'static str,
    users: &[usize],
    provider: &Provider,
) -> Row {
    let (primary, backup) = (
        provider.primary.load(Ordering::Relaxed),
        provider.backup.load(Ordering::Relaxed),
    );
    let mut results = Vec::new();
    for &wave in users {
        results.extend(join_all((0..wave).map(|_| user(breakers, provider))).await);
    }
    let primary_calls = provider.primary.load(Ordering::Relaxed) - primary;
    let users_calling_primary = results.iter().filter(|(_, called)| *called).count() as u32;
    let answered = results.iter().filter(|(result, _)| result.is_ok()).count() as u32;
    Row {
        breakers,
        load,
        primary_calls,
        backup_calls: provider.backup.load(Ordering::Relaxed) - backup,
        waits: primary_calls - users_calling_primary,
        answered,
        failed: results.len() as u32 - answered,
    }
}

/// 10 sequential users, then two waves of 8 parallel users, for each breaker layout. Call
/// it once per process: the breakers are per function, as in an application.
pub async fn run() -> Vec<Row> {
    crate::timeline::rows(run_recorded(None).await)
}

/// [`run`], with each row's timeline when `timeline` is given (and installed as a listener).
pub async fn run_recorded(timeline: Option<&Timeline>) -> Vec<(Row, Option<Recording>)> {
    let record = || timeline.map(Timeline::take);
    let mut rows = Vec::new();
    for breakers in [Breakers::Shared, Breakers::PerModel] {
        let provider = Provider::default();
        record();
        let row = measure(breakers, "sequential", &[1; 10], &provider).await;
        rows.push((row, record()));
        let row = measure(breakers, "parallel", &[8, 8], &provider).await;
        rows.push((row, record()));
    }
    rows
}
