//! The DESIGN example, running: a client whose `complete` method is `#[resilient]`, against
//! a simulated provider where one model is flaky and one is down. Runs on tokio's paused
//! clock, so the 30-second cooldown takes no wall time.
//!
//! cargo run --example quickstart

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil::events::{Event, Listener};
use resil::{resilient, Rejected, Transient};
use tokio::time::Instant;

#[derive(Debug, thiserror::Error, Transient)]
enum LlmError {
    #[error("provider busy")]
    #[transient]
    Busy,
    #[error("rate limited")]
    #[transient(retry_after = wait)]
    RateLimited { wait: Option<Duration> },
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

struct ChatRequest {
    prompt: String,
}

/// A provider we do not control: `flaky-1` fails every other call, `down-1` always fails,
/// `slow-1` hangs.
struct Client {
    calls: AtomicU32,
}

impl Client {
    #[resilient(timeout = "2s", retry = 2, breaker = "per_model", bulkhead = 8)]
    async fn complete(&self, model: &str, req: &ChatRequest) -> Result<String, LlmError> {
        self.http_call(model, req).await
    }

    async fn http_call(&self, model: &str, req: &ChatRequest) -> Result<String, LlmError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(120)).await;
        match model {
            "flaky-1" if n % 2 == 0 => Err(LlmError::RateLimited {
                wait: Some(Duration::from_secs(1)),
            }),
            "down-1" => Err(LlmError::Busy),
            "slow-1" => std::future::pending().await,
            _ if req.prompt.is_empty() => Err(LlmError::BadRequest("empty prompt".into())),
            _ => Ok(format!("{model} says hi")),
        }
    }
}

/// Prints breaker transitions as they happen.
#[derive(Debug)]
struct Transitions(Instant);

impl Listener for Transitions {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::BreakerTransition {
            breaker,
            transition,
        } = event
        {
            println!(
                "{:>8.1}s   breaker {breaker}: {} -> {}",
                self.0.elapsed().as_secs_f64(),
                transition.from,
                transition.to
            );
        }
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let start = Instant::now();
    resil::events::add_global_listener(Arc::new(Transitions(start)));
    let client = Client {
        calls: AtomicU32::new(0),
    };
    let say = |prompt: &str| ChatRequest {
        prompt: prompt.into(),
    };

    println!("#[resilient(timeout = \"2s\", retry = 2, breaker = \"per_model\", bulkhead = 8)]\n");
    println!(
        "{:>9}   {:<8} {:<7} {:>9}   result",
        "at", "model", "prompt", "took"
    );
    let script = [
        ("flaky-1", "hello"),
        ("flaky-1", ""),
        ("slow-1", "hello"),
        ("down-1", "hello"),
        ("down-1", "hello"),
        ("down-1", "hello"),
        ("flaky-1", "hello"),
    ];
    for (model, prompt) in script {
        let before = client.calls.load(Ordering::Relaxed);
        let began = Instant::now();
        let result = client.complete(model, &say(prompt)).await;
        let calls = client.calls.load(Ordering::Relaxed) - before;
        let outcome = match result {
            Ok(text) => format!("ok: {text}"),
            Err(LlmError::Rejected(rejected)) => format!("rejected: {rejected}"),
            Err(error) if error.is_transient() => format!("transient: {error}"),
            Err(error) => format!("permanent: {error}"),
        };
        println!(
            "{:>8.1}s   {model:<8} {:<7} {:>8.1}s   {outcome}   [{calls} provider call{}]",
            began.duration_since(start).as_secs_f64(),
            format!("{prompt:?}"),
            began.elapsed().as_secs_f64(),
            if calls == 1 { "" } else { "s" }
        );
    }
    println!("\nThe breaker for down-1 opened after 5 transient failures; flaky-1 and slow-1 kept their own.");
}
