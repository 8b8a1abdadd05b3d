//! `hedge = "1 after 800ms"`: a slow attempt is raced by another inside the caller's task;
//! the first success wins. On the paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use resil::{resilient, Operation, Rejected, Transient};
use tokio::time::{sleep, Instant};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
enum LlmError {
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

#[derive(Default)]
struct Client {
    calls: AtomicU32,
}

impl Client {
    /// The first call takes 5 s, the others 100 ms.
    fn delay(&self) -> (u32, Duration) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let ms = if call == 0 { 5000 } else { 100 };
        (call, Duration::from_millis(ms))
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
    async fn complete(&self, prompt: String) -> Result<String, LlmError> {
        let (call, delay) = self.delay();
        let id = Operation::current().unwrap().id().to_string();
        sleep(delay).await;
        Ok(format!("{prompt} from call {call} of {id}"))
    }

    #[resilient(first_item_timeout = "10s", retry = 1, hedge = "1 after 800ms")]
    async fn stream(
        &self,
        prompt: &str,
    ) -> Result<impl Stream<Item = Result<String, LlmError>>, LlmError> {
        let (call, delay) = self.delay();
        let prompt = prompt.to_owned();
        Ok(futures::stream::once(async move {
            sleep(delay).await;
            Ok(format!("{prompt} from call {call}"))
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_is_raced_and_the_hedge_answers() {
    let client = Client::default();
    let start = Instant::now();
    let answer = client.complete("hello".to_owned()).await.unwrap();
    assert!(answer.starts_with("hello from call 1 of "), "{answer}");
    assert_eq!(start.elapsed(), Duration::from_millis(900));
    assert_eq!(client.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_slow_stream_is_raced_and_the_consumer_sees_the_winner_only() {
    let client = Client::default();
    let stream = client.stream("hello").await.unwrap();
    let items: Vec<_> = stream.collect().await;
    assert_eq!(items, [Ok("hello from call 1".to_owned())]);
}

struct Router;

impl Router {
    #[resilient(timeout = "10s", retry = 2, breaker = "per_model", hedge = "1 after 800ms",
                route = model in ["claude-sonnet"])]
    async fn complete(&self, model: &str) -> Result<String, LlmError> {
        let delay = if model == "gpt-4o" { 5000 } else { 100 };
        sleep(Duration::from_millis(delay)).await;
        Ok(format!("{model} answered"))
    }
}

#[tokio::test(start_paused = true)]
async fn with_a_route_the_hedge_goes_to_the_next_model() {
    let start = Instant::now();
    let answer = Router.complete("gpt-4o").await;
    assert_eq!(answer, Ok("claude-sonnet answered".to_owned()));
    assert_eq!(start.elapsed(), Duration::from_millis(900));
}
