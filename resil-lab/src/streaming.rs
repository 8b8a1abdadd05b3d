//! Streaming against the [mock provider](crate::mock), over loopback and real time: the same
//! answer streamed and blocking, then each way a stream fails and what its consumer sees.

use std::time::{Duration, Instant};

use futures::StreamExt;
use resil::Transient;

use crate::client::{ChatClient, Chunk, ClientError};
use crate::mock::{MockProvider, Stats};

/// How one call went, as its consumer saw it.
#[derive(Debug)]
pub struct Run {
    /// What the row shows.
    pub name: &'static str,
    /// The text received, in order.
    pub text: String,
    /// Tokens received.
    pub tokens: usize,
    /// Whether `[DONE]` arrived.
    pub complete: bool,
    /// The error that ended the call or the stream, if any.
    pub error: Option<ClientError>,
    /// From the call to the first token (to the whole answer, for a blocking call).
    pub first_token: Option<Duration>,
    /// From the call to the end of the answer.
    pub total: Duration,
    /// What the provider did meanwhile.
    pub provider: Stats,
}

impl Run {
    /// One line for people: what the consumer saw.
    pub fn saw(&self) -> String {
        let text = match (self.tokens, self.complete) {
            (0, _) => "no token".to_owned(),
            // A short answer is shown whole, so a mangled character would show.
            (n @ ..=3, true) => format!("{n} tokens {:?}, then [DONE]", self.text),
            (n, true) => format!("{n} tokens, then [DONE]"),
            (n, false) => format!("{n} tokens"),
        };
        match &self.error {
            None => text,
            Some(error) => {
                let kind = if error.is_transient() {
                    "transient"
                } else {
                    "permanent"
                };
                format!("{text}, then {kind} error: {error}")
            }
        }
    }

    /// One JSON object for `--json`.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "step": self.name,
            "tokens": self.tokens,
            "complete": self.complete,
            "error": self.error.as_ref().map(ToString::to_string),
            "first_token_ms": self.first_token.map(|d| d.as_millis() as u64),
            "total_ms": self.total.as_millis() as u64,
            "requests": self.provider.requests,
            "generations": self.provider.generations,
            "rate_limited": self.provider.rate_limited,
        })
    }
}

/// The answer every row asks for: 20 tokens, 40 ms apart.
const ANSWER: &str = "/v1/chat/completions?tokens=20&delay=40";

/// The rows, in order: streamed and blocking, then the failure modes.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("streamed", ANSWER),
    (
        "stall before the first event",
        "/v1/chat/completions?stall=0",
    ),
    (
        "stall after 3 events",
        "/v1/chat/completions?delay=20&stall=3",
    ),
    (
        "closed after 3 events, no [DONE]",
        "/v1/chat/completions?delay=20&cut=3&how=close",
    ),
    (
        "reset after 3 events",
        "/v1/chat/completions?delay=20&cut=3",
    ),
    (
        "429 with Retry-After before the stream",
        "/v1/chat/completions?fail_first=1",
    ),
    (
        "CRLF, event: lines, multibyte split across frames",
        "/v1/chat/completions?style=hostile&tokens=3",
    ),
];

/// Runs the blocking call and every scenario against one fresh provider, one at a time.
pub async fn run() -> std::io::Result<Vec<Run>> {
    let provider = MockProvider::start().await?;
    let client = ChatClient::new(provider.url(""));
    let mut runs = Vec::new();
    let mut before = provider.stats();

    let started = Instant::now();
    let blocking = client.complete_patiently(ANSWER).await;
    let total = started.elapsed();
    let after = provider.stats();
    runs.push(Run {
        name: "blocking",
        tokens: blocking
            .as_ref()
            .map_or(0, |c| c.text.split_whitespace().count()),
        complete: blocking.is_ok(),
        text: blocking.as_ref().map_or(String::new(), |c| c.text.clone()),
        error: blocking.err(),
        first_token: Some(total),
        total,
        provider: delta(before, after),
    });
    before = after;

    for (name, path) in SCENARIOS {
        let mut run = consume(&client, name, path).await;
        let after = provider.stats();
        run.provider = delta(before, after);
        before = after;
        runs.push(run);
    }
    provider.stop().await;
    Ok(runs)
}

/// Streams one answer to its end, noting what arrived and when.
async fn consume(client: &ChatClient, name: &'static str, path: &str) -> Run {
    let started = Instant::now();
    let mut run = Run {
        name,
        text: String::new(),
        tokens: 0,
        complete: false,
        error: None,
        first_token: None,
        total: Duration::ZERO,
        provider: Stats::default(),
    };
    match client.stream_chat(path).await {
        Err(error) => run.error = Some(error),
        Ok(stream) => {
            let mut stream = std::pin::pin!(stream);
            while let Some(chunk) = stream.next().await {
                match chunk {
                    Ok(Chunk::Token(token)) => {
                        run.first_token.get_or_insert_with(|| started.elapsed());
                        run.tokens += 1;
                        run.text.push_str(&token);
                    }
                    Ok(Chunk::Done) => run.complete = true,
                    Err(error) => run.error = Some(error),
                }
            }
        }
    }
    run.total = started.elapsed();
    run
}

fn delta(before: Stats, after: Stats) -> Stats {
    Stats {
        requests: after.requests - before.requests,
        generations: after.generations - before.generations,
        replays: after.replays - before.replays,
        rate_limited: after.rate_limited - before.rate_limited,
    }
}
