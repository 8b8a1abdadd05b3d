//! `fallback`: called for transient errors and rejections, never for permanent errors.

mod support;

use std::time::Duration;

use resil::resilient;
use support::{ApiError, Calls};

struct Llm {
    primary: Calls,
    backup: Calls,
}

impl Llm {
    #[resilient(retry = 1, timeout = "1s", fallback = Self::backup)]
    async fn answer(&self, prompt: String, failure: Option<ApiError>) -> Result<String, ApiError> {
        self.primary.add();
        match failure {
            Some(error) => Err(error),
            None => Ok(format!("primary: {prompt}")),
        }
    }

    async fn backup(&self, prompt: String, _failure: Option<ApiError>) -> Result<String, ApiError> {
        self.backup.add();
        Ok(format!("backup: {prompt}"))
    }

    #[resilient(timeout = "1s", fallback = Self::backup)]
    async fn hanging(
        &self,
        prompt: String,
        _failure: Option<ApiError>,
    ) -> Result<String, ApiError> {
        self.primary.add();
        let _ = prompt;
        std::future::pending().await
    }
}

fn llm() -> Llm {
    Llm {
        primary: Calls::default(),
        backup: Calls::default(),
    }
}

#[tokio::test(start_paused = true)]
async fn transient_errors_fall_back_after_the_retries() {
    let llm = llm();
    assert_eq!(
        llm.answer("hi".into(), Some(ApiError::Busy)).await,
        Ok("backup: hi".into())
    );
    assert_eq!((llm.primary.count(), llm.backup.count()), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn rejections_fall_back() {
    let llm = llm();
    assert_eq!(
        llm.hanging("hi".into(), None).await,
        Ok("backup: hi".into()),
        "timeout"
    );
    assert_eq!(llm.backup.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_never_fall_back() {
    let llm = llm();
    let bad = ApiError::BadRequest("too long".into());
    assert_eq!(llm.answer("x".into(), Some(bad.clone())).await, Err(bad));
    assert_eq!((llm.primary.count(), llm.backup.count()), (1, 0));
    assert_eq!(
        llm.answer("ok".into(), None).await,
        Ok("primary: ok".into())
    );
    assert_eq!(llm.backup.count(), 0);
}

#[resilient(breaker = "attr-fallback-breaker", breaker_threshold = 1, fallback = cached)]
async fn quote(symbol: &str, calls: &Calls) -> Result<String, ApiError> {
    calls.add();
    let _ = symbol;
    Err(ApiError::RetryAfter {
        wait: Some(Duration::from_secs(1)),
    })
}

async fn cached(symbol: &str, _calls: &Calls) -> Result<String, ApiError> {
    Ok(format!("{symbol}: cached"))
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_falls_back_without_a_call() {
    let calls = Calls::default();
    assert_eq!(quote("ACME", &calls).await, Ok("ACME: cached".into()));
    assert_eq!(quote("ACME", &calls).await, Ok("ACME: cached".into()));
    assert_eq!(calls.count(), 1);
}
