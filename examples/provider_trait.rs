//! Adopting resil in application code as it is: an async-openai-style client (its error type
//! another crate's, no `Transient`), wrapped by a `Provider` trait written with
//! `#[async_trait]` and called through `Arc<dyn Provider>`, returning `anyhow::Result`. One
//! attribute on the impl's method; a function names which of the SDK's errors are worth
//! retrying, and resil classifies the rest by their chain (a refused connection deep in a
//! `reqwest::Error`). Against the mock provider on 127.0.0.1 (started and stopped by this
//! program), it prints each failure, what it was judged, and what resil did. Real time: about
//! 2 seconds.
//!
//! cargo run --example provider_trait --features anyhow

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use async_trait::async_trait;
use resil::events::{AttemptOutcome, Event, Listener};
use resil::{resilient, Classification, Transient};
use resil_lab::mock::MockProvider;

/// An SDK as async-openai is written: a client, a request, and an error enum of its own,
/// which resil knows nothing of (and this program may not implement `Transient` for).
#[allow(unreachable_pub)] // public as in the crate it stands for
mod openai {
    use std::time::Duration;

    #[derive(Debug, thiserror::Error)]
    pub enum OpenAIError {
        /// The request never got an answer: connect, timeout, a cut body.
        #[error("http error")]
        Reqwest(#[from] reqwest::Error),
        /// The API answered with an error.
        #[error("{0}")]
        ApiError(ApiError),
    }

    #[derive(Debug)]
    pub struct ApiError {
        pub status: u16,
        pub code: Option<String>,
        pub retry_after: Option<Duration>,
    }

    impl std::fmt::Display for ApiError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "API error {}", self.status)?;
            match &self.code {
                Some(code) => write!(f, " ({code})"),
                None => Ok(()),
            }
        }
    }

    pub struct Client {
        http: reqwest::Client,
        endpoint: String,
    }

    impl Client {
        pub fn new(endpoint: String) -> Self {
            Client {
                http: reqwest::Client::new(),
                endpoint,
            }
        }

        /// `POST /chat/completions`: the answer's text, or what went wrong.
        pub async fn create(&self, model: &str, prompt: &str) -> Result<String, OpenAIError> {
            let body = serde_json::json!({
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
            });
            let response = self.http.post(&self.endpoint).json(&body).send().await?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok()?.parse().ok())
                .map(Duration::from_secs);
            let text = response.text().await?;
            if status >= 400 {
                let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                let code = json["error"]["code"].as_str().map(str::to_owned);
                return Err(OpenAIError::ApiError(ApiError {
                    status,
                    code,
                    retry_after,
                }));
            }
            // Server-sent events: each `data:` line holds a chunk of the answer.
            let chunks = text.lines().filter_map(|line| line.strip_prefix("data: "));
            let deltas = chunks.filter(|data| *data != "[DONE]").map(|data| {
                let chunk: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
                chunk["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            });
            Ok(deltas.collect::<Vec<_>>().join(" "))
        }
    }
}

use openai::OpenAIError;

/// The application's own abstraction over providers: dyn-compatible through async-trait.
#[async_trait]
trait Provider: Send + Sync {
    async fn complete(&self, prompt: &str) -> anyhow::Result<String>;
}

struct OpenAi {
    client: openai::Client,
    model: String,
}

#[async_trait]
impl Provider for OpenAi {
    #[resilient(timeout = "500ms", retry = 2, backoff = "50ms..200ms", transient = judge, listener = LOG)]
    async fn complete(&self, prompt: &str) -> anyhow::Result<String> {
        let answer = self.client.create(&self.model, prompt).await;
        answer.with_context(|| format!("asking {}", self.model))
    }
}

/// Which errors are worth retrying: the SDK's API errors by their status and code; anything
/// else as resil finds it in the chain (a `reqwest::Error` under `OpenAIError::Reqwest`).
fn judge(error: &anyhow::Error) -> Classification {
    let (class, by) = match error.downcast_ref::<OpenAIError>() {
        Some(OpenAIError::ApiError(api)) => {
            let class = match (api.status, api.code.as_deref()) {
                // Out of credit: no wait helps.
                (429, Some("insufficient_quota")) => Classification::Permanent,
                (429, _) => Classification::Throttle {
                    wait: api.retry_after,
                },
                (500.., _) => Classification::Transient,
                _ => Classification::Permanent,
            };
            (class, "by `judge`: the API's status and code")
        }
        _ => (Classification::of(error), "by resil: the error's chain"),
    };
    let root = error.root_cause();
    println!("    failed: {error} ({root})");
    println!("      judged {} ({by})", said(class));
    class
}

fn said(class: Classification) -> String {
    match class {
        Classification::Permanent => "permanent".into(),
        Classification::Transient => "transient".into(),
        Classification::Wait(wait) => format!("transient, not before {} ms", wait.as_millis()),
        Classification::Throttle { wait: Some(wait) } => format!(
            "a throttle, not before {} ms, not counted by a breaker",
            wait.as_millis()
        ),
        Classification::Throttle { wait: None } => "a throttle".into(),
        Classification::MoveOn => "for another target".into(),
        other => format!("{other:?}"),
    }
}

/// What resil did, as its events say: timeouts (its own failures, which it judges itself),
/// waits before a retry, and why it stopped.
#[derive(Debug)]
struct Log {
    attempts: AtomicU32,
}

static LOG: Log = Log {
    attempts: AtomicU32::new(0),
};

impl Listener for Log {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::AttemptStarted { .. } => {
                self.attempts.fetch_add(1, Ordering::Relaxed);
            }
            Event::AttemptEnded {
                outcome: AttemptOutcome::Rejected(rejected),
                ..
            } => println!(
                "    failed: {rejected}\n      judged {} (by resil: its own failure)",
                if rejected.is_transient() {
                    "transient"
                } else {
                    "permanent"
                }
            ),
            Event::Waiting { wait, .. } => {
                println!("    retried after {} ms", wait.as_millis())
            }
            Event::GaveUp { reason, .. } => println!("    gave up: {}", reason.as_str()),
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mock = MockProvider::start().await?;
    // A port nobody listens on: the connection is refused.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await?
        .local_addr()?;
    let provider = |endpoint: String| -> Arc<dyn Provider> {
        Arc::new(OpenAi {
            client: openai::Client::new(endpoint),
            model: "gpt-4o".into(),
        })
    };
    let steps = [
        (
            "throttled once (429, Retry-After: 1), then answers",
            mock.url("/v1/chat/completions?tokens=3&fail_first=1"),
        ),
        ("hangs: each attempt cut at 500 ms", mock.url("/hang")),
        ("a bad API key (401)", mock.url("/401")),
        (
            "out of credit (429, insufficient_quota)",
            mock.url("/quota"),
        ),
        (
            "nobody listening: the connection is refused",
            format!("http://{closed}/v1/chat/completions"),
        ),
    ];
    for (name, endpoint) in steps {
        println!("{name}");
        let provider = provider(endpoint);
        LOG.attempts.store(0, Ordering::Relaxed);
        let started = Instant::now();
        let answer = provider.complete("hello").await;
        let attempts = LOG.attempts.load(Ordering::Relaxed);
        let elapsed = started.elapsed().as_millis();
        match answer {
            Ok(text) => {
                println!("  answered after {attempts} attempt(s), {elapsed} ms: {text:?}\n")
            }
            Err(error) => println!(
                "  failed after {attempts} attempt(s), {elapsed} ms: {error} ({})\n",
                error.root_cause()
            ),
        }
    }
    mock.stop().await;
    Ok(())
}
