//! `#[resilient]` on a method of an `#[async_trait]` impl or trait: the method behaves as a
//! plain `async fn` with the attribute, called through `Arc<dyn Provider>`. On the paused clock.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::{sleep, Instant};

#[async_trait]
trait Provider: Send + Sync {
    async fn complete(&self, model: &str, prompt: String) -> Result<String, ApiError>;

    /// A default method, guarded where it is declared.
    #[resilient(timeout = "1s", retry = 2, backoff = "100ms..100ms", jitter = "none")]
    async fn ping(&self) -> Result<u32, ApiError> {
        let n = self.calls().add();
        if n < 3 {
            return Err(ApiError::Busy);
        }
        Ok(n)
    }

    fn calls(&self) -> &Calls;
}

/// Fails with `Busy` the first `fail` calls, takes `slow` per call.
struct Flaky {
    calls: Calls,
    fail: u32,
    slow: Duration,
    models: Mutex<Vec<String>>,
}

impl Flaky {
    fn new(fail: u32, slow: Duration) -> Self {
        Flaky {
            calls: Calls::default(),
            fail,
            slow,
            models: Mutex::default(),
        }
    }
}

#[async_trait]
impl Provider for Flaky {
    #[resilient(
        timeout = "1s",
        retry = 2,
        backoff = "100ms..100ms",
        jitter = "none",
        breaker = "per_model"
    )]
    async fn complete(&self, model: &str, mut prompt: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        self.models.lock().unwrap().push(model.to_owned());
        sleep(self.slow).await;
        if n <= self.fail {
            return Err(ApiError::Busy);
        }
        prompt.push('!');
        Ok(format!("{prompt} from {model} on call {n}"))
    }

    fn calls(&self) -> &Calls {
        &self.calls
    }
}

#[tokio::test(start_paused = true)]
async fn a_method_of_an_async_trait_impl_is_retried_through_a_dyn_provider() {
    let provider: Arc<dyn Provider> = Arc::new(Flaky::new(2, Duration::from_millis(10)));
    let started = Instant::now();
    let answer = provider.complete("gpt", "hi".into()).await;
    assert_eq!(answer.as_deref(), Ok("hi! from gpt on call 3"));
    assert_eq!(provider.calls().count(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(3 * 10 + 2 * 100));
}

#[tokio::test(start_paused = true)]
async fn a_method_of_an_async_trait_impl_times_out_like_a_plain_one() {
    let provider: Arc<dyn Provider> = Arc::new(Flaky::new(0, Duration::from_secs(5)));
    let started = Instant::now();
    let answer = provider.complete("slow", "hi".into()).await;
    assert_eq!(
        answer,
        Err(ApiError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(1)
        }))
    );
    assert_eq!(provider.calls().count(), 3, "each timeout retried");
    assert_eq!(started.elapsed(), Duration::from_millis(3 * 1000 + 2 * 100));
}

#[tokio::test(start_paused = true)]
async fn the_future_of_an_async_trait_method_is_send() {
    let provider: Arc<dyn Provider> = Arc::new(Flaky::new(1, Duration::ZERO));
    let answer = tokio::spawn(async move { provider.complete("spawned", "hi".into()).await });
    assert_eq!(
        answer.await.unwrap().as_deref(),
        Ok("hi! from spawned on call 2")
    );
}

#[tokio::test(start_paused = true)]
async fn a_default_method_of_an_async_trait_is_guarded() {
    let provider: Arc<dyn Provider> = Arc::new(Flaky::new(0, Duration::ZERO));
    let started = Instant::now();
    assert_eq!(provider.ping().await, Ok(3));
    assert_eq!(started.elapsed(), Duration::from_millis(200));
}

/// Routed and hedged methods, and a receiver taken by value (`self: Arc<Self>`).
#[async_trait]
trait Router: Send + Sync {
    async fn routed(&self, model: &str) -> Result<String, ApiError>;
    async fn hedged(&self, prompt: String) -> Result<String, ApiError>;
    async fn owned(self: Arc<Self>, prompt: String) -> Result<String, ApiError>;
    async fn fallen_back(&self, prompt: &str) -> Result<String, ApiError>;
    async fn traced_outside(&self, prompt: String) -> Result<String, ApiError>;
    async fn traced_inside(&self, prompt: String) -> Result<String, ApiError>;
}

impl Flaky {
    async fn cached(&self, prompt: &str) -> Result<String, ApiError> {
        Ok(format!("{prompt} from the cache"))
    }
}

#[async_trait]
impl Router for Flaky {
    #[resilient(route = model in ["small", "large"], retry = 2, backoff = "100ms..100ms", jitter = "none")]
    async fn routed(&self, model: &str) -> Result<String, ApiError> {
        self.models.lock().unwrap().push(model.to_owned());
        if model != "large" {
            return Err(ApiError::Busy);
        }
        Ok(format!("answered by {model}"))
    }

    #[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
    async fn hedged(&self, prompt: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        sleep(if n == 1 {
            Duration::from_secs(5)
        } else {
            Duration::from_millis(100)
        })
        .await;
        Ok(format!("{prompt} from call {n}"))
    }

    #[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
    async fn owned(self: Arc<Self>, prompt: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        if n <= self.fail {
            return Err(ApiError::Busy);
        }
        Ok(format!("{prompt} on call {n}"))
    }

    #[resilient(retry = 1, backoff = "100ms..100ms", jitter = "none", fallback = Self::cached)]
    async fn fallen_back(&self, prompt: &str) -> Result<String, ApiError> {
        self.calls.add();
        Err(ApiError::Busy)
    }

    #[tracing::instrument(skip(self))]
    #[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
    async fn traced_outside(&self, prompt: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        if n <= self.fail {
            return Err(ApiError::Busy);
        }
        Ok(format!("{prompt} on call {n}"))
    }

    #[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
    #[tracing::instrument(skip(self))]
    async fn traced_inside(&self, prompt: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        if n <= self.fail {
            return Err(ApiError::Busy);
        }
        Ok(format!("{prompt} on call {n}"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_route_goes_to_the_next_model_in_an_async_trait_impl() {
    let flaky = Arc::new(Flaky::new(0, Duration::ZERO));
    let router: Arc<dyn Router> = flaky.clone();
    assert_eq!(
        router.routed("tiny").await.as_deref(),
        Ok("answered by large")
    );
    assert_eq!(*flaky.models.lock().unwrap(), ["tiny", "small", "large"]);
}

#[tokio::test(start_paused = true)]
async fn a_hedge_races_a_slow_attempt_in_an_async_trait_impl() {
    let router: Arc<dyn Router> = Arc::new(Flaky::new(0, Duration::ZERO));
    let started = Instant::now();
    assert_eq!(
        router.hedged("hi".into()).await.as_deref(),
        Ok("hi from call 2")
    );
    assert_eq!(started.elapsed(), Duration::from_millis(900));
}

#[tokio::test(start_paused = true)]
async fn a_receiver_by_value_is_cloned_for_each_attempt_in_an_async_trait_impl() {
    let flaky = Arc::new(Flaky::new(2, Duration::ZERO));
    let router: Arc<dyn Router> = flaky.clone();
    assert_eq!(
        router.owned("hi".into()).await.as_deref(),
        Ok("hi on call 3")
    );
    let router: Arc<dyn Router> = flaky;
    assert_eq!(
        router.fallen_back("hi").await.as_deref(),
        Ok("hi from the cache")
    );
}

#[tokio::test(start_paused = true)]
async fn tracing_instrument_stacks_on_either_side_in_an_async_trait_impl() {
    let router: Arc<dyn Router> = Arc::new(Flaky::new(2, Duration::ZERO));
    assert_eq!(
        router.traced_outside("hi".into()).await.as_deref(),
        Ok("hi on call 3")
    );
    let router: Arc<dyn Router> = Arc::new(Flaky::new(2, Duration::ZERO));
    assert_eq!(
        router.traced_inside("hi".into()).await.as_deref(),
        Ok("hi on call 3")
    );
}
