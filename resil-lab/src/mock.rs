//! A hostile mock provider: a real HTTP/1.1 server on 127.0.0.1 speaking a
//! chat-completions-like protocol with Server-Sent Events.
//!
//! - `POST /v1/chat/completions`: streams `tokens` chunks (`?tokens=N`, default 5), each after
//!   `?delay=ms` (default 0), then `data: [DONE]`. `?cut=N` abandons the stream after N
//!   chunks: by connection reset, or with `&how=close` by an orderly end without `[DONE]`.
//!   `?stall=N` stops sending after N chunks (0: before the first) and holds the connection
//!   open until the client leaves. `?hold=N` goes silent after N chunks until the client
//!   leaves, then finishes the answer (billed, and kept for a replay). `?fail_first=K`
//!   answers the first K such requests 429 with `Retry-After`. `?style=hostile` sends what real servers send and naive parsers break on:
//!   `\r\n` line ends, an `event:` and an `id:` line in each event, multibyte text, and each
//!   event in two frames split inside a multibyte character.
//!   At most 3 requests generate at once ([`MockProvider::with_capacity`] for another
//!   number); beyond that, 429 with `Retry-After` (1 s by default). With an
//!   `Idempotency-Key` header, a key seen before replays the answer generated for it
//!   (waiting for it if it is still being generated) instead of generating and billing it
//!   again. Generation goes on when the client hangs up, as it does at real
//!   providers: it is billed either way.
//! - With [`MockProvider::with_rate_limit`], at most N requests per second reach the
//!   completions endpoint (a sliding window, as nginx's `limit_req` without burst would
//!   count); the others get 429 with `Retry-After: 1`, and are not billed.
//! - With [`MockProvider::with_stated_limit`], at most N completions per fixed window (from
//!   the server's start), and every answer says so as OpenAI's do: `x-ratelimit-limit-requests`,
//!   `x-ratelimit-remaining-requests` and `x-ratelimit-reset-requests` (a Go duration); past
//!   the limit, 429 with `retry-after-ms` until the window ends, not billed.
//!   [`MockProvider::set_stated_limit`] changes the limit mid-run, at once.
//! - [`MockProvider::set_capacity`] changes how many generate at once, mid-run: lowered, the
//!   generations under way finish, and requests are answered 429 until fewer generate.
//! - [`MockProvider::set_down`] starts and ends an outage: meanwhile completions answer 503.
//! - [`MockProvider::with_quota`]: N completions, then 429s. [`MockProvider::slow_tail`]: every
//!   N-th answer slow to its first token. [`MockProvider::no_replays`]: keys not replayed.
//! - [`MockProvider::answer_together`] holds the first requests' answers until they are all in.
//! - `/hang`: accepts the request and never answers.
//! - `/401`: answers 401 Unauthorized. `/503`: 503 with `Retry-After: 1`. `/quota`: 429
//!   whose body says `insufficient_quota` (the account is out of credit; no wait helps).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

mod generate;
mod quirks;
mod stated;

use generate::{generate, sse, Generation};

type Body = BoxBody<Bytes, std::io::Error>;
/// A finished answer's chunks, published when generation ends.
type Answer = Option<Arc<Vec<String>>>;

/// What the provider has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// HTTP requests received.
    pub requests: u32,
    /// Answers generated (and billed).
    pub generations: u32,
    /// Answers replayed for a known `Idempotency-Key`.
    pub replays: u32,
    /// Requests turned away with 429.
    pub rate_limited: u32,
}

#[derive(Debug, Default)]
struct State {
    requests: AtomicU32,
    generations: AtomicU32,
    replays: AtomicU32,
    rate_limited: AtomicU32,
    generating: AtomicU32,
    /// Requests that asked for `fail_first`, so far.
    asked_to_fail: AtomicU32,
    /// Requests per second let through, and when the ones of the last second came.
    rate_limit: Option<(usize, Mutex<std::collections::VecDeque<std::time::Instant>>)>,
    /// Generations at once ([`MockProvider::set_capacity`] changes it mid-run).
    capacity: AtomicU32,
    retry_after_secs: u64,
    /// Idempotency key → the answer's chunks, filled in when generation ends.
    answers: Mutex<HashMap<String, watch::Receiver<Answer>>>,
    /// An outage: completions answer 503 until it ends.
    down: AtomicBool,
    /// Requests whose answers wait until this many have come in (0: none wait).
    together: AtomicU32,
    /// Wakes the waiting requests once the last of them is in.
    all_in: tokio::sync::Notify,
    /// A quota and a slow tail ([`MockProvider::with_quota`], [`MockProvider::slow_tail`]).
    quirks: quirks::Quirks,
    /// A limit stated on every answer ([`MockProvider::with_stated_limit`]).
    stated: Option<stated::Stated>,
}

/// The running server; stopped when dropped or by [`MockProvider::stop`].
#[derive(Debug)]
pub struct MockProvider {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl MockProvider {
    /// Starts on an ephemeral port of 127.0.0.1: 3 generations at once, `Retry-After: 1`.
    pub async fn start() -> std::io::Result<Self> {
        Self::with_capacity(3, 1).await
    }

    /// Starts with another capacity and `Retry-After`.
    pub async fn with_capacity(capacity: u32, retry_after_secs: u64) -> std::io::Result<Self> {
        Self::serve(State {
            capacity: AtomicU32::new(capacity),
            retry_after_secs,
            ..State::default()
        })
        .await
    }

    /// Starts with at most `per_second` completions per second (any number at once); the
    /// rest get 429 with `Retry-After: 1`.
    pub async fn with_rate_limit(per_second: usize) -> std::io::Result<Self> {
        Self::serve(State {
            capacity: AtomicU32::new(u32::MAX),
            retry_after_secs: 1,
            rate_limit: Some((per_second, Mutex::default())),
            ..State::default()
        })
        .await
    }

    async fn serve(state: State) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(state);
        let (shutdown, mut stop) = oneshot::channel();
        let served = Arc::clone(&state);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stop => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        // Dropping an aborted connection then sends a reset, not a FIN.
                        let _ = stream.set_zero_linger();
                        let state = Arc::clone(&served);
                        connections.spawn(async move {
                            let service = service_fn(move |request| handle(Arc::clone(&state), request));
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        });
                    }
                }
            }
            connections.shutdown().await;
        });
        Ok(MockProvider {
            addr,
            state,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts (`true`) or ends an outage: meanwhile completions answer 503 with
    /// `Retry-After: 1`, as `/503` does.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Changes how many requests generate at once, at once: lowered below how many are
    /// generating, those finish and new ones are answered 429 until fewer than `capacity`
    /// generate. For a provider whose capacity shrinks and recovers mid-run.
    pub fn set_capacity(&self, capacity: u32) {
        self.state.capacity.store(capacity, Ordering::SeqCst);
    }

    /// Holds the answers of the first `requests` requests (counted from the start) until the
    /// last of them is in, then answers them all; later requests are answered at once. So that
    /// callers started together all reach the provider before any answer comes back, however
    /// late the scheduler runs the last of them: a breaker then sees every first attempt start
    /// before its first failure. A request that never comes leaves the others waiting: the
    /// count must be what the callers send.
    pub fn answer_together(&self, requests: u32) {
        self.state.together.store(requests, Ordering::SeqCst);
    }

    /// What it has done so far.
    pub fn stats(&self) -> Stats {
        let load = |n: &AtomicU32| n.load(Ordering::SeqCst);
        Stats {
            requests: load(&self.state.requests),
            generations: load(&self.state.generations),
            replays: load(&self.state.replays),
            rate_limited: load(&self.state.rate_limited),
        }
    }

    /// Stops accepting, closes every connection and waits for the server task.
    pub async fn stop(mut self) {
        self.shut_down();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    fn shut_down(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl Drop for MockProvider {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn full(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

fn unavailable() -> Response<Body> {
    let mut response = full(StatusCode::SERVICE_UNAVAILABLE, r#"{"error":"overloaded"}"#);
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, 1.into());
    response
}

fn query(request: &Request<Incoming>, key: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == key).then(|| value.to_owned())
    })
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let arrived = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
    together(&state, arrived).await;
    let response = match request.uri().path() {
        "/hang" => std::future::pending().await,
        "/401" => full(StatusCode::UNAUTHORIZED, r#"{"error":"invalid api key"}"#),
        "/503" => unavailable(),
        "/quota" => full(
            StatusCode::TOO_MANY_REQUESTS,
            r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#,
        ),
        "/v1/chat/completions" if state.down.load(Ordering::SeqCst) => unavailable(),
        "/v1/chat/completions" if state.quirks.over_quota() => too_many_requests(&state),
        "/v1/chat/completions" => match state.stated() {
            Some(stated) => stated::completions_stated(Arc::clone(&state), stated, request),
            None => completions(state, request),
        },
        _ => full(StatusCode::NOT_FOUND, r#"{"error":"no such endpoint"}"#),
    };
    Ok(response)
}

/// Waits, if `arrived` (this request's number) is one of those [`MockProvider::answer_together`]
/// holds, until the last of them is in.
async fn together(state: &State, arrived: u32) {
    let together = state.together.load(Ordering::SeqCst);
    if arrived > together {
        return;
    }
    if arrived == together {
        state.all_in.notify_waiters();
        return;
    }
    loop {
        let all_in = state.all_in.notified();
        tokio::pin!(all_in);
        // Registered before the count is read: the last request's wake-up cannot slip by.
        all_in.as_mut().enable();
        if state.requests.load(Ordering::SeqCst) >= together {
            return;
        }
        all_in.await;
    }
}

fn completions(state: Arc<State>, request: Request<Incoming>) -> Response<Body> {
    let number = |key, default| {
        query(&request, key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let tokens: usize = number("tokens", 5);
    let delay = Duration::from_millis(number("delay", 0) as u64);
    let cut: Option<usize> = query(&request, "cut").and_then(|v| v.parse().ok());
    let stall: Option<usize> = query(&request, "stall").and_then(|v| v.parse().ok());
    let hold: Option<usize> = query(&request, "hold").and_then(|v| v.parse().ok());
    let orderly = query(&request, "how").as_deref() == Some("close");
    let hostile = query(&request, "style").as_deref() == Some("hostile");
    let fail_first: u32 = number("fail_first", 0) as u32;
    if fail_first > 0 && state.asked_to_fail.fetch_add(1, Ordering::SeqCst) < fail_first {
        return too_many_requests(&state);
    }
    if let Some((per_second, recent)) = &state.rate_limit {
        let now = std::time::Instant::now();
        let mut recent = recent.lock().unwrap();
        while recent
            .front()
            .is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(1))
        {
            recent.pop_front();
        }
        if recent.len() >= *per_second {
            drop(recent);
            return too_many_requests(&state);
        }
        recent.push_back(now);
    }
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);

    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let known = key.as_ref().and_then(|key| state.replay(key));
    match known {
        Some(mut answer) => {
            state.replays.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let chunks = loop {
                    if let Some(chunks) = answer.borrow().clone() {
                        break chunks;
                    }
                    if answer.changed().await.is_err() {
                        return;
                    }
                };
                for chunk in chunks.iter() {
                    let _ = tx.send(Ok(Frame::data(sse(chunk)))).await;
                }
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
                    .await;
            });
        }
        None => {
            if state.generating.fetch_add(1, Ordering::SeqCst)
                >= state.capacity.load(Ordering::SeqCst)
            {
                state.generating.fetch_sub(1, Ordering::SeqCst);
                return too_many_requests(&state);
            }
            state.generations.fetch_add(1, Ordering::SeqCst);
            let (done, answer) = watch::channel(None);
            if let Some(key) = &key {
                state.answers.lock().unwrap().insert(key.clone(), answer);
            }
            let generation = Generation {
                tokens,
                delay,
                cut,
                stall,
                hold,
                orderly,
                hostile,
                key,
            };
            tokio::spawn(generate(state, generation, tx, done));
        }
    }
    let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    }));
    let mut response = Response::new(BodyExt::boxed(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "text/event-stream".parse().expect("valid header"),
    );
    response
}

fn too_many_requests(state: &State) -> Response<Body> {
    state.rate_limited.fetch_add(1, Ordering::SeqCst);
    let mut response = full(StatusCode::TOO_MANY_REQUESTS, r#"{"error":"overloaded"}"#);
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, state.retry_after_secs.into());
    response
}

/// One JSON object for a step of a client's run against the mock.
pub fn step_json(
    name: &str,
    answered: usize,
    callers: usize,
    elapsed: Duration,
    stats: Stats,
) -> serde_json::Value {
    serde_json::json!({
        "step": name,
        "answered": answered,
        "callers": callers,
        "elapsed_ms": elapsed.as_millis() as u64,
        "requests": stats.requests,
        "generations": stats.generations,
        "replays": stats.replays,
        "rate_limited": stats.rate_limited,
    })
}
