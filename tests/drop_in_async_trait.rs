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
    async fn owned_keyed(self: Arc<Self>, model: String) -> Result<String, ApiError>;
    async fn fallen_back(&self, prompt: &str) -> Result<String, ApiError>;
    async fn traced_outside(&self, prompt: String) -> Result<String, ApiError>;
    async fn traced_inside(&self, prompt: String) -> Result<String, ApiError>;
}

/// What `owned_keyed` retries.
fn busy(error: &ApiError) -> bool {
    matches!(error, ApiError::Busy)
}

impl Flaky {
    async fn cached(&self, prompt: &str) -> Result<String, ApiError> {
        Ok(format!("{prompt} from the cache"))
    }

    fn kind(&self) -> &'static str {
        "flaky"
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

    /// `self` in the attribute's expressions, a receiver async-trait moved (it failed with
    /// "use of moved value: `self`"), and `self::` the module, which stays one.
    #[resilient(key = (self.kind(), model.as_str()), breaker = "per_key", retry = 2,
                backoff = "100ms..100ms", jitter = "none", transient = self::busy)]
    async fn owned_keyed(self: Arc<Self>, model: String) -> Result<String, ApiError> {
        let n = self.calls.add();
        if n <= self.fail {
            return Err(ApiError::Busy);
        }
        Ok(format!("{model} on call {n}"))
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
    let router: Arc<dyn Router> = Arc::new(Flaky::new(1, Duration::ZERO));
    assert_eq!(
        router.owned_keyed("gpt".into()).await.as_deref(),
        Ok("gpt on call 2")
    );
    let named = resil::breaker::breakers()
        .into_iter()
        .map(|status| status.name);
    assert!(
        named
            .into_iter()
            .any(|name| &*name == "(self.kind(), model.as_str())=(flaky, gpt)"),
        "the key's label is the expression as written"
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

/// A default method's policy is one for every implementor: what must be each one's own is
/// keyed by it.
#[async_trait]
trait Named: Send + Sync {
    fn name(&self) -> &str;
    fn failing(&self) -> bool;
    fn calls(&self) -> &Calls;

    /// Keyed by the model alone: one breaker per model for every implementor.
    #[resilient(breaker = "per_model", breaker_threshold = 1, breaker_cooldown = "60s")]
    async fn by_model(&self, model: &str) -> Result<String, ApiError> {
        self.call(model)
    }

    /// Keyed by the implementor too: each its own breaker.
    #[resilient(key = (self.name(), model), breaker = "per_key", breaker_threshold = 1, breaker_cooldown = "60s")]
    async fn by_provider(&self, model: &str) -> Result<String, ApiError> {
        self.call(model)
    }

    fn call(&self, model: &str) -> Result<String, ApiError> {
        self.calls().add();
        match self.failing() {
            true => Err(ApiError::Busy),
            false => Ok(format!("{model} from {}", self.name())),
        }
    }
}

struct Hosted {
    name: &'static str,
    failing: bool,
    calls: Calls,
}

impl Named for Hosted {
    fn name(&self) -> &str {
        self.name
    }
    fn failing(&self) -> bool {
        self.failing
    }
    fn calls(&self) -> &Calls {
        &self.calls
    }
}

#[tokio::test(start_paused = true)]
async fn a_default_methods_policy_is_shared_by_implementors_unless_keyed_by_them() {
    let hosted = |name, failing| -> Arc<dyn Named> {
        Arc::new(Hosted {
            name,
            failing,
            calls: Calls::default(),
        })
    };
    let (openai, azure) = (hosted("openai", true), hosted("azure", false));
    // OpenAI's failure opens the one `gpt-4o` breaker: Azure's call is refused without a call.
    assert_eq!(openai.by_model("gpt-4o").await, Err(ApiError::Busy));
    let refused = azure.by_model("gpt-4o").await;
    assert!(
        matches!(
            refused,
            Err(ApiError::Rejected(Rejected::BreakerOpen { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(azure.calls().count(), 0);
    // Keyed by the provider, OpenAI's failure is its own.
    assert_eq!(openai.by_provider("gpt-4o").await, Err(ApiError::Busy));
    assert_eq!(
        azure.by_provider("gpt-4o").await.as_deref(),
        Ok("gpt-4o from azure")
    );
    assert_eq!(openai.calls().count(), 2);
}
