//! One logical operation, one budget: a trace of who retries, how many attempts are
//! allowed, what the fallback did and where new work stopped.
//!
//! cargo run --example one_budget
//!
//! Runs on tokio's paused clock: timeouts and waits take no wall time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use resil::events::{AttemptOutcome, Event, Listener};
use resil::{resilient, Operation, Rejected, Transient};

#[derive(Debug, thiserror::Error, Transient)]
enum Error {
    #[error("unavailable")]
    #[transient]
    Unavailable,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// Prints one line per attempt, wait and decision, with the operation they belong to.
#[derive(Debug)]
struct Trace;

fn short(site: &str) -> &str {
    site.rsplit("::").next().unwrap_or(site)
}

impl Listener for Trace {
    fn on_event(&self, event: &Event<'_>) {
        let operation = Operation::current();
        let id = operation
            .as_ref()
            .map(|o| o.id().to_string()[29..].to_owned())
            .unwrap_or_default();
        let owner = operation
            .as_ref()
            .and_then(|o| o.retry_owner().map(|s| short(s).to_owned()))
            .unwrap_or_else(|| "-".into());
        let left = operation
            .as_ref()
            .and_then(|o| o.retries_left())
            .map_or("-".to_owned(), |n| n.to_string());
        let line = match event {
            Event::AttemptEnded {
                site,
                attempt,
                outcome,
                ..
            } => {
                let outcome = match outcome {
                    AttemptOutcome::Ok => "ok".to_owned(),
                    AttemptOutcome::Transient => "transient error".to_owned(),
                    AttemptOutcome::Permanent => "permanent error".to_owned(),
                    AttemptOutcome::Rejected(rejected) => rejected.kind().to_owned(),
                    AttemptOutcome::Cancelled => "cancelled".to_owned(),
                    _ => "?".to_owned(),
                };
                format!("{:<16} attempt {attempt}  {outcome}", short(site))
            }
            Event::Waiting { site, wait, .. } => {
                format!("{:<16} retry in {} ms", short(site), wait.as_millis())
            }
            Event::GaveUp { site, reason, .. } => {
                format!("{:<16} no new call: {}", short(site), reason.as_str())
            }
            Event::Rejected { site, rejected, .. } => {
                format!("{:<16} no call: {}", short(site), rejected.kind())
            }
            _ => return,
        };
        println!("  op …{id}  owner {owner:<8} retries left {left:<2}  {line}");
    }
}

/// The provider: hangs for the first `hangs` calls, then answers.
struct Provider {
    calls: AtomicU32,
    hangs: u32,
}

impl Provider {
    async fn call(&self) -> Result<String, Error> {
        if self.calls.fetch_add(1, Ordering::Relaxed) < self.hangs {
            std::future::pending::<()>().await;
        }
        Ok("answer".into())
    }
}

#[resilient(timeout = "1s", retry = 1, backoff = "200ms..200ms", jitter = "none")]
async fn answer(provider: &Provider) -> Result<String, Error> {
    provider.call().await
}

#[resilient(timeout = "500ms", fallback = no_recommendations)]
async fn recommendations(_user: &str) -> Result<Vec<String>, Error> {
    Err(Error::Unavailable)
}

async fn no_recommendations(user: &str) -> Result<Vec<String>, Error> {
    println!("  fallback: recommendations for {user} unavailable, served an empty list (no retry)");
    Ok(Vec::new())
}

#[resilient(timeout = "2s", retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn page(user: &str) -> Result<String, Error> {
    let picks = recommendations(user).await?;
    Ok(format!(
        "page for {user} with {} recommendations",
        picks.len()
    ))
}

#[resilient(retry = 3, backoff = "100ms..100ms", jitter = "none")]
async fn dependency(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::Relaxed);
    Err(Error::Unavailable)
}

#[resilient(retry = 3, backoff = "100ms..100ms", jitter = "none")]
async fn service(calls: &AtomicU32) -> Result<(), Error> {
    dependency(calls).await
}

#[resilient(retry = 3, backoff = "100ms..100ms", jitter = "none")]
async fn gateway(calls: &AtomicU32) -> Result<(), Error> {
    service(calls).await
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    resil::events::add_global_listener(Arc::new(Trace));

    println!("1. a timeout, then success on the second attempt");
    let provider = Provider {
        calls: AtomicU32::new(0),
        hangs: 1,
    };
    println!(
        "  => {:?}\n",
        answer(&provider).await.map_err(|e| e.to_string())
    );

    println!("2. two timeouts, and no third call");
    let provider = Provider {
        calls: AtomicU32::new(0),
        hangs: 2,
    };
    println!(
        "  => {:?}\n",
        answer(&provider).await.map_err(|e| e.to_string())
    );

    println!("3. an optional part unavailable, served by its fallback without a new retry");
    println!("  => {:?}\n", page("ada").await.map_err(|e| e.to_string()));

    println!("4. three layers of retry = 3 over a dead dependency: one allowance");
    let calls = AtomicU32::new(0);
    let result = gateway(&calls).await;
    println!(
        "  => {:?}: the dependency saw {} calls, not 4 × 4 × 4 = 64",
        result.map_err(|e| e.to_string()),
        calls.load(Ordering::Relaxed)
    );
}
