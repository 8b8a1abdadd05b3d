//! A chat client over reqwest, made resilient with one attribute per method, and the
//! scenarios it plays against the [mock provider](crate::mock).

use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use http::StatusCode;
use resil::{resilient, Operation, Rejected, Transient};

/// What can go wrong talking to the provider.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The provider answered with an error status.
    #[error("the provider answered {status}")]
    Status {
        /// The status.
        status: StatusCode,
        /// Its `Retry-After`, if any.
        retry_after: Option<Duration>,
    },
    /// The request failed on the way (connect, reset, ...).
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    /// The stream ended before its final `[DONE]`.
    #[error("the answer stopped before its end")]
    Truncated,
    /// The provider sent something that is not a chat event: asking again will not help.
    #[error("malformed event stream: {0}")]
    Malformed(String),
    /// The runtime stopped the call.
    #[error(transparent)]
    Rejected(#[from] Rejected),
}

/// By hand, because the status decides: 429, 408 and 5xx are worth another try.
impl Transient for ClientError {
    fn is_transient(&self) -> bool {
        match self {
            ClientError::Status { status, .. } => status.is_transient(),
            ClientError::Http(error) => error.is_transient(),
            ClientError::Truncated => true,
            ClientError::Malformed(_) => false,
            ClientError::Rejected(rejected) => rejected.is_transient(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            ClientError::Status { retry_after, .. } => *retry_after,
            ClientError::Rejected(rejected) => rejected.retry_after(),
            _ => None,
        }
    }

    /// A 429: a gate then holds its callers for the wait, and a route moves on at once.
    fn is_throttle(&self) -> bool {
        matches!(self, ClientError::Status { status, .. } if status.is_throttle())
    }
}

/// One event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// The next piece of text.
    Token(String),
    /// `data: [DONE]`: the answer is complete.
    Done,
}

impl Chunk {
    /// Is this the final event? (`complete_when = Chunk::is_final`)
    pub fn is_final(&self) -> bool {
        *self == Chunk::Done
    }

    /// Does it carry text? OpenAI's first chunk holds only the role, an empty delta: the
    /// stream commits at the first content (`commit_when = Chunk::has_content`), so a stall
    /// before it is retried.
    pub fn has_content(&self) -> bool {
        matches!(self, Chunk::Token(text) if !text.is_empty())
    }
}

/// A streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The tokens, concatenated.
    pub text: String,
    /// The attempt that produced it (0 for the first).
    pub attempt: u32,
}

/// Talks to one provider.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    base: String,
}

impl ChatClient {
    /// A client for the provider at `base` (`http://127.0.0.1:PORT`).
    pub fn new(base: impl Into<String>) -> Self {
        ChatClient {
            http: reqwest::Client::new(),
            base: base.into(),
        }
    }

    /// Impatient: 300 ms per attempt, 2 retries. Each attempt sends the operation's id as
    /// `Idempotency-Key`, so a retry after a timeout is not billed twice.
    #[resilient(timeout = "300ms", retry = 2, backoff = "50ms..100ms")]
    pub async fn complete(&self, path: &str) -> Result<Completion, ClientError> {
        self.stream(path).await
    }

    /// Patient: 5 s per attempt, 3 retries: for a provider that is busy, not down.
    #[resilient(timeout = "5s", retry = 3, backoff = "50ms..100ms")]
    pub async fn complete_patiently(&self, path: &str) -> Result<Completion, ClientError> {
        self.stream(path).await
    }

    /// Streaming: returns once the first text is in hand (within 300 ms of the request,
    /// retried twice before that; a role-only chunk does not count), then ends with an error if the provider goes silent for
    /// 300 ms or the answer ends without `[DONE]`, and within 10 s in any case.
    #[resilient(
        first_item_timeout = "300ms",
        idle_timeout = "300ms",
        deadline = "10s",
        retry = 2,
        backoff = "50ms..100ms",
        commit_when = Chunk::has_content,
        complete_when = Chunk::is_final
    )]
    pub async fn stream_chat(
        &self,
        path: &str,
    ) -> Result<impl Stream<Item = Result<Chunk, ClientError>>, ClientError> {
        self.events(path).await
    }

    /// The whole answer at once, read from the same events.
    async fn stream(&self, path: &str) -> Result<Completion, ClientError> {
        let operation = Operation::current();
        let mut events = std::pin::pin!(self.events(path).await?);
        let mut text = String::new();
        while let Some(chunk) = events.next().await {
            match chunk? {
                Chunk::Token(token) => text.push_str(&token),
                Chunk::Done => {
                    return Ok(Completion {
                        text,
                        attempt: operation.map_or(0, |o| o.attempt()),
                    })
                }
            }
        }
        Err(ClientError::Truncated)
    }

    /// Sends the request (with the operation's id as `Idempotency-Key`) and decodes the
    /// answer's server-sent events into chunks: one attempt of a streamed call, once the
    /// answer's headers are in.
    pub async fn events(
        &self,
        path: &str,
    ) -> Result<impl Stream<Item = Result<Chunk, ClientError>> + Send + 'static, ClientError> {
        let mut request = self.http.post(format!("{}{path}", self.base));
        if let Some(operation) = Operation::current() {
            request = request.header("idempotency-key", operation.id().to_string());
        }
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            return Err(ClientError::Status {
                status,
                retry_after: resil::http::retry_after(response.headers()),
            });
        }
        Ok(decode(response.bytes_stream()))
    }
}

/// Server-sent events (any line ends, split anywhere, with `event:` and `id:` fields) to
/// chunks: each `data:` holds a chat delta or `[DONE]`.
pub fn decode<S, B>(bytes: S) -> impl Stream<Item = Result<Chunk, ClientError>>
where
    S: Stream<Item = Result<B, reqwest::Error>>,
    B: AsRef<[u8]>,
{
    bytes.eventsource().map(|event| {
        let event = event.map_err(|error| match error {
            EventStreamError::Transport(error) => ClientError::Http(error),
            EventStreamError::Utf8(error) => ClientError::Malformed(error.to_string()),
            EventStreamError::Parser(error) => ClientError::Malformed(error.to_string()),
        })?;
        if event.data == "[DONE]" {
            return Ok(Chunk::Done);
        }
        let value: serde_json::Value = serde_json::from_str(&event.data)
            .map_err(|error| ClientError::Malformed(error.to_string()))?;
        let token = value["choices"][0]["delta"]["content"]
            .as_str()
            .unwrap_or_default();
        Ok(Chunk::Token(token.to_owned()))
    })
}

/// One step of the [`tour`].
#[derive(Debug)]
pub struct Step {
    /// What the step shows.
    pub name: &'static str,
    /// What the caller got (for several concurrent callers: the last one's).
    pub results: Vec<Result<Completion, ClientError>>,
    /// Until the last caller had its answer.
    pub elapsed: Duration,
    /// What the provider did during the step.
    pub provider: crate::mock::Stats,
}

/// The client against a fresh mock provider on loopback: a hang cut by the timeout, a 401
/// not retried, 429s waited out per `Retry-After`, a timeout-then-retry billed once thanks
/// to the idempotency key, and streams cut by a reset and by an orderly close.
pub async fn tour() -> std::io::Result<Vec<Step>> {
    use crate::mock::{MockProvider, Stats};
    use futures::future::join_all;

    let provider = MockProvider::start().await?;
    let client = ChatClient::new(provider.url(""));
    let mut steps = Vec::new();
    let mut before = provider.stats();
    let mut step = |name, results, elapsed: Duration, after: Stats| {
        let delta = Stats {
            requests: after.requests - before.requests,
            generations: after.generations - before.generations,
            replays: after.replays - before.replays,
            rate_limited: after.rate_limited - before.rate_limited,
        };
        before = after;
        steps.push(Step {
            name,
            results,
            elapsed,
            provider: delta,
        });
    };

    let started = std::time::Instant::now();
    let hang = client.complete("/hang").await;
    step(
        "hang, cut by the timeout",
        vec![hang],
        started.elapsed(),
        provider.stats(),
    );

    let started = std::time::Instant::now();
    let unauthorized = client.complete("/401").await;
    step(
        "401, not retried",
        vec![unauthorized],
        started.elapsed(),
        provider.stats(),
    );

    let started = std::time::Instant::now();
    let busy =
        join_all((0..5).map(|_| client.complete_patiently("/v1/chat/completions?delay=20"))).await;
    step(
        "5 at once against a capacity of 3: 429, Retry-After",
        busy,
        started.elapsed(),
        provider.stats(),
    );

    let started = std::time::Instant::now();
    let slow = client.complete("/v1/chat/completions?hold=2").await;
    step(
        "timeout, retry with the same Idempotency-Key",
        vec![slow],
        started.elapsed(),
        provider.stats(),
    );

    let started = std::time::Instant::now();
    let reset = client.complete("/v1/chat/completions?cut=2").await;
    step(
        "stream reset after 2 chunks",
        vec![reset],
        started.elapsed(),
        provider.stats(),
    );

    let started = std::time::Instant::now();
    let closed = client
        .complete("/v1/chat/completions?cut=2&how=close")
        .await;
    step(
        "stream closed after 2 chunks, no [DONE]",
        vec![closed],
        started.elapsed(),
        provider.stats(),
    );

    provider.stop().await;
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// Decodes `frames` as if they arrived one by one from the network.
    async fn decoded(frames: &[&[u8]]) -> Vec<Chunk> {
        let frames: Vec<Result<Bytes, reqwest::Error>> = frames
            .iter()
            .map(|frame| Ok(Bytes::copy_from_slice(frame)))
            .collect();
        decode(futures::stream::iter(frames))
            .map(|chunk| chunk.unwrap())
            .collect()
            .await
    }

    fn delta(text: &str) -> String {
        format!(r#"data: {{"choices":[{{"delta":{{"content":"{text}"}}}}]}}"#)
    }

    #[tokio::test]
    async fn a_multibyte_character_split_across_frames_stays_whole() {
        let event = format!("{}\n\n", delta("🌍"));
        let split = event.find('🌍').unwrap() + 2;
        let chunks = decoded(&[&event.as_bytes()[..split], &event.as_bytes()[split..]]).await;
        assert_eq!(chunks, [Chunk::Token("🌍".into())]);
    }

    #[tokio::test]
    async fn crlf_line_ends_are_line_ends() {
        let stream = format!("{}\r\n\r\ndata: [DONE]\r\n\r\n", delta("hi"));
        let chunks = decoded(&[stream.as_bytes()]).await;
        assert_eq!(chunks, [Chunk::Token("hi".into()), Chunk::Done]);
    }

    #[tokio::test]
    async fn events_with_event_and_id_lines_keep_their_data() {
        let stream = format!(
            "event: message\nid: 7\n{}\n\n: a comment\nevent: message\ndata: [DONE]\n\n",
            delta("hi")
        );
        let chunks = decoded(&[stream.as_bytes()]).await;
        assert_eq!(chunks, [Chunk::Token("hi".into()), Chunk::Done]);
    }

    /// Keep-alive comments are not items (they would reset the idle timeout of a stalled
    /// stream); a role-only chunk is an item without content.
    #[tokio::test]
    async fn keep_alive_comments_are_not_items_and_a_role_chunk_has_no_content() {
        let role = r#"data: {"choices":[{"delta":{"role":"assistant"}}]}"#;
        let stream = format!(": ping\n\n{role}\n\n: ping\n\n:\n\n{}\n\n", delta("hi"));
        let chunks = decoded(&[stream.as_bytes()]).await;
        assert_eq!(
            chunks,
            [Chunk::Token(String::new()), Chunk::Token("hi".into())]
        );
        assert_eq!(
            chunks.iter().map(Chunk::has_content).collect::<Vec<_>>(),
            [false, true]
        );
    }
}
