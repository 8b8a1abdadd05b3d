//! `route = model in [...]`: each attempt goes to a target, the caller's value of `model` then
//! the listed ones; the body sees `model` bound to the attempt's target. On the paused clock.

use std::sync::Mutex;

use futures::{stream, Stream, StreamExt};
use resil::{resilient, Operation, Rejected, Transient};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
enum LlmError {
    #[error("overloaded")]
    #[transient]
    Overloaded,
    #[error("context too long for this model")]
    #[transient(route)]
    ContextTooLong,
    #[error("bad request")]
    BadRequest,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// A provider whose models answer as scripted, recording which model each call went to and
/// under which operation id.
#[derive(Default)]
struct Client {
    down: Vec<&'static str>,
    too_small: Vec<&'static str>,
    calls: Mutex<Vec<(String, String)>>,
    fallbacks: Vec<String>,
}

impl Client {
    fn answer(&self, model: &str) -> Result<String, LlmError> {
        let id = Operation::current()
            .map(|op| op.id().to_string())
            .unwrap_or_default();
        self.calls.lock().unwrap().push((model.to_owned(), id));
        if self.down.contains(&model) {
            Err(LlmError::Overloaded)
        } else if self.too_small.contains(&model) {
            Err(LlmError::ContextTooLong)
        } else if model == "broken" {
            Err(LlmError::BadRequest)
        } else {
            Ok(format!("{model} answered"))
        }
    }

    fn models(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(model, _)| model.clone())
            .collect()
    }

    #[resilient(retry = 2, breaker = "per_model", breaker_threshold = 1, route = model in ["claude-sonnet", "gpt-4o-mini"])]
    async fn complete(&self, model: &str, prompt: &str) -> Result<String, LlmError> {
        let _ = prompt;
        self.answer(model)
    }

    /// No state at all: the route moves on after failures and skips nothing.
    #[resilient(retry = 3, route = model in ["claude-sonnet", "gpt-4o-mini"])]
    async fn complete_stateless(&self, model: &str) -> Result<String, LlmError> {
        self.answer(model)
    }

    #[resilient(retry = 2, route = model in self.fallbacks.iter().cloned())]
    async fn complete_owned(&self, model: String) -> Result<String, LlmError> {
        self.answer(&model)
    }

    #[resilient(retry = 2, breaker = "per_model", route = model in ["claude-sonnet"])]
    async fn stream(
        &self,
        model: &str,
    ) -> Result<impl Stream<Item = Result<String, LlmError>>, LlmError> {
        let first = self.answer(model);
        let model = model.to_owned();
        Ok(stream::iter([first, Ok(format!("{model}: more"))]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_failure_moves_to_the_next_target_and_the_body_sees_it() {
    let client = Client {
        down: vec!["gpt-4o"],
        ..Client::default()
    };
    let answer = client.complete("gpt-4o", "hello").await;
    assert_eq!(answer, Ok("claude-sonnet answered".to_owned()));
    assert_eq!(client.models(), ["gpt-4o", "claude-sonnet"]);
    // gpt-4o's breaker is open (threshold 1): the next call skips it without calling it.
    let answer = client.complete("gpt-4o", "hello").await;
    assert_eq!(answer, Ok("claude-sonnet answered".to_owned()));
    assert_eq!(
        client.models(),
        ["gpt-4o", "claude-sonnet", "claude-sonnet"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_targets_share_one_operation_id() {
    let client = Client {
        down: vec!["gpt-4o", "claude-sonnet"],
        ..Client::default()
    };
    client.complete_stateless("gpt-4o").await.unwrap();
    let calls = client.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    assert!(calls.iter().all(|(_, id)| *id == calls[0].1), "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn an_error_marked_route_moves_on_and_never_comes_back() {
    let client = Client {
        too_small: vec!["gpt-4o"],
        down: vec!["claude-sonnet", "gpt-4o-mini"],
        ..Client::default()
    };
    assert_eq!(
        client.complete_stateless("gpt-4o").await,
        Err(LlmError::Overloaded)
    );
    // gpt-4o refused for good, then claude-sonnet and gpt-4o-mini at once, then back to
    // claude-sonnet after the backoff: never gpt-4o again.
    assert_eq!(
        client.models(),
        ["gpt-4o", "claude-sonnet", "gpt-4o-mini", "claude-sonnet"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_ends_the_operation() {
    let client = Client::default();
    assert_eq!(
        client.complete("broken", "hello").await,
        Err(LlmError::BadRequest)
    );
    assert_eq!(client.models(), ["broken"]);
}

#[tokio::test(start_paused = true)]
async fn the_targets_may_come_from_an_expression_evaluated_per_call() {
    let client = Client {
        down: vec!["primary"],
        fallbacks: vec!["primary".into(), "secondary".into()],
        ..Client::default()
    };
    let answer = client.complete_owned("primary".to_owned()).await;
    assert_eq!(answer, Ok("secondary answered".to_owned()));
    assert_eq!(client.models(), ["primary", "secondary"]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_fails_before_its_commit_moves_to_the_next_target() {
    let client = Client {
        down: vec!["gpt-4o"],
        ..Client::default()
    };
    let stream = client.stream("gpt-4o").await.unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(
        items,
        [
            Ok("claude-sonnet answered".to_owned()),
            Ok("claude-sonnet: more".to_owned())
        ]
    );
}
