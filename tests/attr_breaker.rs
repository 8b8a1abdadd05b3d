//! `breaker`: one per argument value (`per_<arg>`) or one per name shared across functions;
//! `breaker_threshold` and `breaker_cooldown` tune it.

mod support;

use std::fmt;
use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};
use tokio::time::advance;

fn is_open(result: &Result<String, ApiError>, name: &str) -> bool {
    matches!(result, Err(ApiError::Rejected(Rejected::BreakerOpen { breaker, .. })) if &**breaker == name)
}

#[resilient(breaker = "per_model", breaker_threshold = 2, breaker_cooldown = "10s")]
async fn by_str(model: &str, calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    if model == "dead" {
        return Err(ApiError::Busy);
    }
    Ok(model.to_owned())
}

#[tokio::test(start_paused = true)]
async fn per_model_breakers_never_share_state() {
    let calls = Calls::default();
    for _ in 0..2 {
        assert_eq!(by_str("dead", &calls).await, Err(ApiError::Busy));
    }
    assert!(is_open(&by_str("dead", &calls).await, "model=dead"));
    assert_eq!(calls.count(), 2, "the open breaker made no call");
    assert_eq!(
        by_str("alive", &calls).await,
        Ok("alive".into()),
        "another model is unaffected"
    );

    advance(Duration::from_secs(10)).await;
    assert_eq!(
        by_str("dead", &calls).await,
        Err(ApiError::Busy),
        "probe after the cooldown"
    );
    assert_eq!(calls.count(), 4);
}

#[resilient(breaker = "per_tenant", breaker_threshold = 1)]
async fn by_string(tenant: String) -> Result<String, ApiError> {
    if tenant.starts_with("bad") {
        return Err(ApiError::Busy);
    }
    Ok(tenant)
}

#[tokio::test(start_paused = true)]
async fn per_arg_with_a_string_argument() {
    assert_eq!(by_string("bad-1".into()).await, Err(ApiError::Busy));
    assert!(is_open(&by_string("bad-1".into()).await, "tenant=bad-1"));
    assert_eq!(by_string("bad-2".into()).await, Err(ApiError::Busy));
    assert_eq!(by_string("good".into()).await, Ok("good".into()));
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Model {
    Large,
    Small,
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Model::Large => "large",
            Model::Small => "small",
        })
    }
}

#[resilient(breaker = "per_model", breaker_threshold = 1, retry = 1)]
async fn by_enum(model: Model, calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    match model {
        Model::Large => Err(ApiError::Busy),
        Model::Small => Ok(model.to_string()),
    }
}

#[tokio::test(start_paused = true)]
async fn per_arg_with_an_enum_argument() {
    let calls = Calls::default();
    assert_eq!(
        by_enum(Model::Large, &calls).await,
        Err(ApiError::Busy),
        "the retry met the open breaker: the provider's error, not a rejection"
    );
    assert_eq!(calls.count(), 1);
    // A type other than text and numbers is named as it prints, the same in every build (its
    // state here is found by its value: two types that print alike never share a breaker).
    assert!(is_open(&by_enum(Model::Large, &calls).await, "model=large"));
    assert_eq!(calls.count(), 1, "no call while open");
    assert_eq!(by_enum(Model::Small, &calls).await, Ok("small".into()));
}

#[resilient(breaker = "attr-test-payments", breaker_threshold = 2)]
async fn charge(calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[resilient(breaker = "attr-test-payments", breaker_threshold = 2)]
async fn refund(calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    Ok("refunded".into())
}

#[tokio::test(start_paused = true)]
async fn a_named_breaker_is_shared_by_every_function_naming_it() {
    let calls = Calls::default();
    assert_eq!(charge(&calls).await, Err(ApiError::Busy));
    assert_eq!(charge(&calls).await, Err(ApiError::Busy));
    assert!(
        is_open(&refund(&calls).await, "attr-test-payments"),
        "charge's failures opened refund's breaker"
    );
    assert_eq!(calls.count(), 2);
    advance(Duration::from_secs(30)).await;
    assert_eq!(
        refund(&calls).await,
        Ok("refunded".into()),
        "default cooldown 30s, then a probe"
    );
}

#[resilient(breaker = "per_model")]
async fn default_threshold(model: &str, calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    let _ = model;
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn the_default_threshold_is_five() {
    let calls = Calls::default();
    for _ in 0..5 {
        assert_eq!(default_threshold("m", &calls).await, Err(ApiError::Busy));
    }
    assert!(is_open(&default_threshold("m", &calls).await, "model=m"));
    assert_eq!(calls.count(), 5);
}
