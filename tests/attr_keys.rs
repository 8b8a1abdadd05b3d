//! `key = <expression>`: one key per function, scoping the breaker (`breaker = "per_key"`),
//! the bulkhead (`bulkhead = "8 per key"`) and the rate gates (`rate = "60/min per key"`).

mod support;

use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::sync::Semaphore;
use tokio::time::Instant;

#[derive(Clone)]
struct Request {
    provider: String,
    model: String,
}

fn request(provider: &str, model: &str) -> Request {
    Request {
        provider: provider.into(),
        model: model.into(),
    }
}

#[resilient(key = req.model, breaker = "per_key", breaker_threshold = 1)]
async fn by_field(req: &Request, calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    if req.model == "dead" {
        return Err(ApiError::Busy);
    }
    Ok(req.model.clone())
}

#[tokio::test(start_paused = true)]
async fn a_breaker_per_field_of_an_argument() {
    let calls = Calls::default();
    let dead = request("openai", "dead");
    assert_eq!(by_field(&dead, &calls).await, Err(ApiError::Busy));
    let refused = by_field(&dead, &calls).await;
    assert!(
        matches!(&refused, Err(ApiError::Rejected(Rejected::BreakerOpen { breaker, .. })) if &**breaker == "req.model=dead"),
        "{refused:?}"
    );
    assert_eq!(calls.count(), 1, "the open breaker made no call");
    let alive = request("openai", "alive");
    assert_eq!(by_field(&alive, &calls).await, Ok("alive".into()));
}

#[resilient(key = (req.provider, req.model), breaker = "per_key", breaker_threshold = 1)]
async fn by_pair(req: Request) -> Result<String, ApiError> {
    if req.provider == "down" {
        return Err(ApiError::Busy);
    }
    Ok(format!("{}/{}", req.provider, req.model))
}

#[tokio::test(start_paused = true)]
async fn a_breaker_per_pair() {
    assert_eq!(by_pair(request("down", "m")).await, Err(ApiError::Busy));
    let refused = by_pair(request("down", "m")).await;
    assert!(
        matches!(&refused, Err(ApiError::Rejected(Rejected::BreakerOpen { breaker, .. })) if &**breaker == "(req.provider, req.model)=(down, m)"),
        "{refused:?}"
    );
    assert_eq!(
        by_pair(request("down", "other")).await,
        Err(ApiError::Busy),
        "another pair has its own breaker"
    );
}

#[resilient(key = (tenant, model), bulkhead = "1 per key")]
async fn per_tenant_and_model(
    tenant: &str,
    model: String,
    gate: &Semaphore,
) -> Result<(), ApiError> {
    let _ = gate.acquire().await;
    let _ = (tenant, model);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_bulkhead_per_argument_pair() {
    let gate = Semaphore::new(0);
    let held = per_tenant_and_model("acme", "gpt".into(), &gate);
    let again = per_tenant_and_model("acme", "gpt".into(), &gate);
    let other = per_tenant_and_model("acme", "o3".into(), &gate);
    let (held, again, other) = tokio::join!(held, again, async {
        let other = other;
        gate.add_permits(2);
        other.await
    });
    assert_eq!(held, Ok(()));
    assert_eq!(
        again,
        Err(ApiError::Rejected(Rejected::BulkheadFull { limit: 1 }))
    );
    assert_eq!(other, Ok(()));
}

#[resilient(key = user, rate = "2/s per key", deadline = "10s")]
async fn per_user(user: u64, started: Instant) -> Result<Duration, ApiError> {
    let _ = user;
    Ok(started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_rate_per_user() {
    let started = Instant::now();
    let mut times = Vec::new();
    for user in [1, 1, 1, 2, 2] {
        times.push(per_user(user, started).await.unwrap().as_millis());
    }
    assert_eq!(
        times,
        [0, 500, 1000, 1000, 1500],
        "user 2 has a gate of its own: its first call does not queue behind user 1's"
    );
}

#[resilient(breaker = "per_model", bulkhead = "1 per key", max_keys = 100)]
async fn short_form(model: &str, gate: &Semaphore) -> Result<(), ApiError> {
    let _ = (model, gate.acquire().await);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_short_form_keys_the_bulkhead_too() {
    let gate = Semaphore::new(0);
    let (first, second) = tokio::join!(short_form("a", &gate), async {
        let second = short_form("a", &gate).await;
        gate.add_permits(1);
        second
    });
    assert_eq!(first, Ok(()));
    assert_eq!(
        second,
        Err(ApiError::Rejected(Rejected::BulkheadFull { limit: 1 }))
    );
}

/// A reference type that reaches the attribute through `macro_rules!` (`$t:ty`) arrives in an
/// invisible group: it is still seen as a reference and borrowed as it is.
macro_rules! keyed_by {
    ($name:ident, $model:ty) => {
        #[resilient(breaker = "per_model", breaker_threshold = 1)]
        async fn $name(model: $model, calls: &Calls) -> Result<String, ApiError> {
            calls.add();
            if model == "dead" {
                return Err(ApiError::Busy);
            }
            Ok(model.to_string())
        }
    };
}

keyed_by!(by_macro_type, &str);

#[tokio::test(start_paused = true)]
async fn a_reference_key_type_from_a_macro_compiles_and_keys() {
    let calls = Calls::default();
    assert_eq!(by_macro_type("dead", &calls).await, Err(ApiError::Busy));
    assert!(matches!(
        by_macro_type("dead", &calls).await,
        Err(ApiError::Rejected(Rejected::BreakerOpen { .. }))
    ));
    assert_eq!(by_macro_type("live", &calls).await, Ok("live".into()));
    assert_eq!(calls.count(), 2);
}

/// A provider client as applications write it: its name and the request's model are read
/// through methods that return `&str`, borrowed from `self` and from the request.
struct Client {
    name: String,
    calls: Calls,
}

impl Request {
    fn model(&self) -> &str {
        &self.model
    }
}

impl Client {
    fn name(&self) -> &str {
        &self.name
    }

    #[resilient(key = self.name(), breaker = "per_key", breaker_threshold = 1)]
    async fn by_name(&self, fail: bool) -> Result<String, ApiError> {
        self.answer(fail)
    }

    #[resilient(key = (self.name(), req.model()), breaker = "per_key", breaker_threshold = 1)]
    async fn by_name_and_model(&self, req: &Request, fail: bool) -> Result<String, ApiError> {
        self.answer(fail)
    }

    fn answer(&self, fail: bool) -> Result<String, ApiError> {
        self.calls.add();
        match fail {
            true => Err(ApiError::Busy),
            false => Ok(self.name.clone()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_borrowed_from_self_or_an_argument_through_a_method() {
    let client = |name: &str| Client {
        name: name.into(),
        calls: Calls::default(),
    };
    let (openai, azure) = (client("openai"), client("azure"));
    assert_eq!(openai.by_name(true).await, Err(ApiError::Busy));
    let refused = openai.by_name(false).await;
    assert!(
        matches!(&refused, Err(ApiError::Rejected(Rejected::BreakerOpen { breaker, .. })) if &**breaker == "self.name()=openai"),
        "{refused:?}"
    );
    assert_eq!(azure.by_name(false).await, Ok("azure".into()));

    let (small, large) = (request("any", "small"), request("any", "large"));
    let _ = openai.by_name_and_model(&small, true).await;
    let refused = openai.by_name_and_model(&small, false).await;
    assert!(
        matches!(&refused, Err(ApiError::Rejected(Rejected::BreakerOpen { breaker, .. })) if breaker.contains("(openai, small)")),
        "{refused:?}"
    );
    assert_eq!(
        openai.by_name_and_model(&large, false).await,
        Ok("openai".into())
    );
    assert_eq!(
        azure.by_name_and_model(&small, false).await,
        Ok("azure".into())
    );
    assert_eq!(openai.calls.count(), 3, "each refusal made no call");
}
