//! `hedge` on functions of every shape: a by-value `self`, a generic function, a fallback,
//! `rate_cost`; and a hedged function's future is `Send` (used in `tokio::spawn`). On the
//! paused clock.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::ApiError;
use resil::resilient;
use tokio::time::sleep;

#[derive(Clone, Default)]
struct Client {
    calls: Arc<AtomicU32>,
}

impl Client {
    fn delay(&self) -> (u32, Duration) {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        (
            call,
            Duration::from_millis(if call == 0 { 5000 } else { 100 }),
        )
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
    async fn by_value(self, prompt: String) -> Result<String, ApiError> {
        let (call, delay) = self.delay();
        sleep(delay).await;
        Ok(format!("{prompt} {call}"))
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
    async fn generic<T: ToString + Clone + Send + Sync>(
        &self,
        item: T,
    ) -> Result<String, ApiError> {
        let (call, delay) = self.delay();
        sleep(delay).await;
        Ok(format!("{} {call}", item.to_string()))
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms", fallback = Self::canned)]
    async fn with_fallback(&self, _prompt: String) -> Result<String, ApiError> {
        let _ = self.delay();
        sleep(Duration::from_secs(9)).await;
        Err(ApiError::Busy)
    }

    async fn canned(&self, _prompt: String) -> Result<String, ApiError> {
        let prompt = _prompt;
        Ok(format!("canned {prompt}"))
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms",
                token_rate = "1000/min", rate_cost = prompt.len() as u64)]
    async fn costed(&self, prompt: String) -> Result<String, ApiError> {
        let (call, delay) = self.delay();
        sleep(delay).await;
        Ok(format!("{prompt} {call}"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedged_self_by_value_races() {
    let client = Client::default();
    assert_eq!(
        client.clone().by_value("a".into()).await,
        Ok("a 1".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_generic_races() {
    let client = Client::default();
    assert_eq!(client.generic(7).await, Ok("7 1".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_hedged_function_falls_back_with_its_arguments() {
    let client = Client::default();
    assert_eq!(
        client.with_fallback("b".into()).await,
        Ok("canned b".to_owned())
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_costed_call_races() {
    let client = Client::default();
    assert_eq!(client.costed("c".into()).await, Ok("c 1".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_hedged_call_can_be_spawned() {
    let client = Client::default();
    let handle = tokio::spawn(async move { client.generic(3).await });
    assert_eq!(handle.await.unwrap(), Ok("3 1".to_owned()));
}
