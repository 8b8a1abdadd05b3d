//! `retry`: transient errors are retried, permanent ones never; the body re-runs per attempt
//! with every kind of receiver and argument, and `return` and `?` behave as written.

mod support;

use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(retry = 2)]
async fn flaky(calls: &Calls, fail_times: u32) -> Result<u32, ApiError> {
    let n = calls.add();
    if n <= fail_times {
        return Err(ApiError::Busy);
    }
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried() {
    let calls = Calls::default();
    assert_eq!(flaky(&calls, 2).await, Ok(3));
    let calls = Calls::default();
    assert_eq!(flaky(&calls, 5).await, Err(ApiError::Busy));
    assert_eq!(calls.count(), 3, "retry = 2: three calls at most");
}

#[resilient(retry = 5)]
async fn bad_request(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    Err(ApiError::BadRequest("no such model".into()))
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_never_retried() {
    let calls = Calls::default();
    let started = Instant::now();
    assert_eq!(
        bad_request(&calls).await,
        Err(ApiError::BadRequest("no such model".into()))
    );
    assert_eq!(calls.count(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

fn parse(text: &str) -> Result<u32, std::num::ParseIntError> {
    text.parse()
}

#[derive(Debug, PartialEq)]
enum ParseError {
    Number,
    Rejected(Rejected),
}

impl resil::Transient for ParseError {
    fn is_transient(&self) -> bool {
        matches!(self, ParseError::Rejected(r) if resil::Transient::is_transient(r))
    }
}

impl From<Rejected> for ParseError {
    fn from(rejected: Rejected) -> Self {
        ParseError::Rejected(rejected)
    }
}

impl From<std::num::ParseIntError> for ParseError {
    fn from(_: std::num::ParseIntError) -> Self {
        ParseError::Number
    }
}

#[resilient(retry = 1, timeout = "1s")]
async fn question_mark(text: &str) -> Result<u32, ParseError> {
    let number = parse(text)?;
    Ok(number * 2)
}

#[tokio::test(start_paused = true)]
async fn question_mark_converts_as_before() {
    assert_eq!(question_mark("21").await, Ok(42));
    assert_eq!(question_mark("x").await, Err(ParseError::Number));
}

struct Session {
    log: Vec<u32>,
    calls: Calls,
}

impl Session {
    #[resilient(retry = 2)]
    async fn record(&mut self, value: u32) -> Result<usize, ApiError> {
        self.log.push(value);
        if self.calls.add() < 3 {
            return Err(ApiError::Busy);
        }
        Ok(self.log.len())
    }

    #[resilient(retry = 2)]
    async fn consume(self, suffix: String) -> Result<String, ApiError> {
        if self.calls.add() < 2 {
            return Err(ApiError::Busy);
        }
        Ok(format!("{}{suffix}", self.log.len()))
    }
}

impl Clone for Session {
    fn clone(&self) -> Self {
        Session {
            log: self.log.clone(),
            calls: self.calls.clone(),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn mut_self_is_borrowed_by_each_attempt() {
    let mut session = Session {
        log: Vec::new(),
        calls: Calls::default(),
    };
    assert_eq!(session.record(7).await, Ok(3));
    assert_eq!(session.log, [7, 7, 7]);
}

#[tokio::test(start_paused = true)]
async fn self_by_value_is_cloned_per_attempt() {
    let session = Session {
        log: vec![1, 2],
        calls: Calls::default(),
    };
    let calls = session.calls.clone();
    assert_eq!(
        session.consume(" entries".into()).await,
        Ok("2 entries".into())
    );
    assert_eq!(calls.count(), 2);
}

#[resilient(retry = 2)]
async fn owned(calls: &Calls, mut text: String) -> Result<String, ApiError> {
    text.push('!');
    if calls.add() < 3 {
        return Err(ApiError::Busy);
    }
    Ok(text)
}

#[tokio::test(start_paused = true)]
async fn by_value_arguments_are_cloned_fresh_for_each_attempt() {
    let calls = Calls::default();
    assert_eq!(
        owned(&calls, "hi".into()).await,
        Ok("hi!".into()),
        "not hi!!!"
    );
}

/// Not `Clone`: fine without retries, since nothing is cloned then.
struct Ticket(u32);

#[resilient(timeout = "1s")]
async fn single_attempt(ticket: Ticket) -> Result<u32, ApiError> {
    Ok(ticket.0)
}

#[tokio::test(start_paused = true)]
async fn without_retry_nothing_is_cloned() {
    assert_eq!(single_attempt(Ticket(9)).await, Ok(9));
}

struct Repository<T> {
    items: Vec<T>,
}

impl<T: Clone + Send + Sync> Repository<T> {
    #[resilient(retry = 1, timeout = "1s")]
    async fn first<'a, K>(&'a self, key: K, calls: &Calls) -> Result<(K, T), ApiError>
    where
        K: Clone + std::fmt::Debug,
    {
        if calls.add() < 2 {
            return Err(ApiError::Busy);
        }
        Ok((key, self.items[0].clone()))
    }
}

#[resilient(retry = 1)]
async fn describe(
    value: impl std::fmt::Display + Clone,
    calls: &Calls,
) -> Result<String, ApiError> {
    if calls.add() < 2 {
        return Err(ApiError::Busy);
    }
    Ok(value.to_string())
}

#[tokio::test(start_paused = true)]
async fn generics_lifetimes_where_clauses_and_impl_trait() {
    let repository = Repository {
        items: vec!["a".to_owned()],
    };
    let calls = Calls::default();
    assert_eq!(repository.first(3u8, &calls).await, Ok((3, "a".to_owned())));
    let calls = Calls::default();
    assert_eq!(describe(12.5, &calls).await, Ok("12.5".into()));
}

trait Completion {
    async fn complete(&self, prompt: &str) -> Result<String, ApiError>;
}

struct Echo(Calls);

impl Completion for Echo {
    #[resilient(retry = 1, timeout = "1s")]
    async fn complete(&self, prompt: &str) -> Result<String, ApiError> {
        if self.0.add() < 2 {
            return Err(ApiError::Busy);
        }
        Ok(prompt.to_uppercase())
    }
}

#[tokio::test(start_paused = true)]
async fn async_fn_in_trait_impls() {
    let echo = Echo(Calls::default());
    assert_eq!(echo.complete("hi").await, Ok("HI".into()));
}

struct Client {
    calls: Calls,
}

impl Client {
    #[resilient(timeout = "5s", retry = 2, breaker = "per_model", bulkhead = 8)]
    async fn complete(&self, model: &str, prompt: String) -> Result<String, ApiError> {
        tokio::task::yield_now().await;
        if self.calls.add() == 1 {
            return Err(ApiError::Busy);
        }
        Ok(format!("{model}: {prompt}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_methods_can_be_spawned_on_a_multi_thread_runtime() {
    let client = std::sync::Arc::new(Client {
        calls: Calls::default(),
    });
    let tasks: Vec<_> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|model| {
            let client = client.clone();
            tokio::spawn(async move { client.complete(model, "hi".to_owned()).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().unwrap().ends_with(": hi"));
    }
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn the_returned_future_is_send_like_an_axum_handler_needs() {
    let client = Client {
        calls: Calls::default(),
    };
    assert_send(&client.complete("m", String::new()));
    let mut session = Session {
        log: Vec::new(),
        calls: Calls::default(),
    };
    assert_send(&session.record(1));
}
