//! `transient = path`: a function decides which errors are worth retrying, for an error type
//! that does not implement `Transient` (a type of another module or crate). On the paused clock.

mod support;

use std::time::Duration;

use resil::{resilient, Classification};
use support::Calls;
use tokio::time::{sleep, Instant};

/// An error type as a client library would define it: no `Transient`, only what it needs
/// to carry resil's own failures.
#[allow(unreachable_pub)]
mod grpc {
    use std::time::Duration;

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Code {
        Unavailable,
        ResourceExhausted,
        InvalidArgument,
        Internal,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Status {
        pub code: Code,
        pub message: String,
        pub retry_after: Option<Duration>,
    }

    impl Status {
        pub fn new(code: Code) -> Self {
            Status {
                code,
                message: String::new(),
                retry_after: None,
            }
        }
    }

    /// resil's failures reach the caller as `Internal`, which the classifiers below call
    /// permanent: resil keeps its own classification of them anyway.
    impl From<resil::Rejected> for Status {
        fn from(rejected: resil::Rejected) -> Self {
            Status {
                code: Code::Internal,
                message: rejected.to_string(),
                retry_after: None,
            }
        }
    }
}

use grpc::{Code, Status};

fn is_retryable(status: &Status) -> bool {
    status.code == Code::Unavailable
}

fn classify(status: &Status) -> Classification {
    match status.code {
        Code::Unavailable => Classification::Transient,
        Code::ResourceExhausted => Classification::Throttle {
            wait: status.retry_after,
        },
        Code::InvalidArgument | Code::Internal => Classification::Permanent,
    }
}

/// Answers `codes` in turn, then `Ok`.
async fn answer(calls: &Calls, codes: &[Status]) -> Result<u32, Status> {
    let n = calls.add();
    match codes.get(n as usize - 1) {
        Some(status) => Err(status.clone()),
        None => Ok(n),
    }
}

#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none", transient = is_retryable)]
async fn call(calls: &Calls, codes: &[Status]) -> Result<u32, Status> {
    answer(calls, codes).await
}

#[tokio::test(start_paused = true)]
async fn a_function_decides_for_an_error_type_without_transient() {
    let calls = Calls::default();
    let unavailable = Status::new(Code::Unavailable);
    assert_eq!(
        call(&calls, &[unavailable.clone(), unavailable]).await,
        Ok(3)
    );
    let calls = Calls::default();
    let invalid = Status::new(Code::InvalidArgument);
    assert_eq!(
        call(&calls, std::slice::from_ref(&invalid)).await,
        Err(invalid)
    );
    assert_eq!(calls.count(), 1, "permanent: not retried");
}

#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none", transient = classify)]
async fn throttled(calls: &Calls, codes: &[Status]) -> Result<u32, Status> {
    answer(calls, codes).await
}

#[tokio::test(start_paused = true)]
async fn a_throttles_wait_is_honoured() {
    let calls = Calls::default();
    let busy = Status {
        retry_after: Some(Duration::from_secs(2)),
        ..Status::new(Code::ResourceExhausted)
    };
    let started = Instant::now();
    assert_eq!(throttled(&calls, &[busy]).await, Ok(2));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[resilient(timeout = "1s", retry = 2, backoff = "100ms..100ms", jitter = "none", transient = is_retryable, breaker = "transient_fn_slow", breaker_threshold = 2)]
async fn slow(calls: &Calls) -> Result<u32, Status> {
    calls.add();
    sleep(Duration::from_secs(5)).await;
    Ok(0)
}

#[tokio::test(start_paused = true)]
async fn the_runtimes_own_failures_keep_its_classification() {
    let calls = Calls::default();
    let started = Instant::now();
    let status = slow(&calls).await.unwrap_err();
    // A timeout, converted into `Internal`, which `is_retryable` calls permanent: retried,
    // and counted by the breaker as the runtime classifies it: two open it, and the third
    // attempt is not made.
    assert_eq!(status.code, Code::Internal);
    assert!(status.message.contains("timed out"), "{}", status.message);
    assert_eq!(calls.count(), 2);
    assert_eq!(started.elapsed(), Duration::from_millis(2 * 1000 + 100));
    let status = slow(&calls).await.unwrap_err();
    assert!(status.message.contains("breaker"), "{}", status.message);
    assert_eq!(calls.count(), 2);
}

fn moves_on(status: &Status) -> Classification {
    match status.code {
        Code::InvalidArgument => Classification::MoveOn,
        _ => Classification::Permanent,
    }
}

#[resilient(route = model in ["large"], retry = 1, transient = moves_on)]
async fn routed(calls: &Calls, model: &str) -> Result<String, Status> {
    calls.add();
    match model {
        "large" => Ok(format!("answered by {model}")),
        _ => Err(Status::new(Code::InvalidArgument)),
    }
}

#[tokio::test(start_paused = true)]
async fn a_classifier_can_move_a_route_on() {
    let calls = Calls::default();
    assert_eq!(
        routed(&calls, "small").await.as_deref(),
        Ok("answered by large")
    );
    assert_eq!(calls.count(), 2);
}

/// An error type as another crate defines it: neither `Transient` nor `From<resil::Rejected>`,
/// and the orphan rule forbids both impls in the program that uses it.
#[allow(unreachable_pub)]
mod sdk {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub enum Status {
        Unavailable,
        InvalidArgument,
        DeadlineExceeded(String),
    }
}

fn sdk_retryable(status: &sdk::Status) -> bool {
    *status == sdk::Status::Unavailable
}

fn to_status(rejected: resil::Rejected) -> sdk::Status {
    sdk::Status::DeadlineExceeded(rejected.to_string())
}

#[resilient(timeout = "1s", retry = 2, backoff = "100ms..100ms", jitter = "none", transient = sdk_retryable, rejected = to_status)]
async fn sdk_call(calls: &Calls, answers: &[Option<sdk::Status>]) -> Result<u32, sdk::Status> {
    let n = calls.add();
    match answers.get(n as usize - 1) {
        Some(Some(status)) => Err(status.clone()),
        // A call that hangs past the attempt's timeout.
        Some(None) => {
            sleep(Duration::from_secs(5)).await;
            Ok(0)
        }
        None => Ok(n),
    }
}

#[tokio::test(start_paused = true)]
async fn a_function_makes_the_error_type_of_another_crate_from_resils_failures() {
    use sdk::Status;
    let calls = Calls::default();
    let unavailable = Some(Status::Unavailable);
    assert_eq!(
        sdk_call(&calls, &[unavailable.clone(), unavailable]).await,
        Ok(3)
    );
    let calls = Calls::default();
    let invalid = Some(Status::InvalidArgument);
    assert_eq!(
        sdk_call(&calls, &[invalid]).await,
        Err(Status::InvalidArgument)
    );
    assert_eq!(calls.count(), 1, "permanent: not retried");
    // Three timeouts: each retried (resil's classification), the last one made a `Status`.
    let calls = Calls::default();
    let started = Instant::now();
    let status = sdk_call(&calls, &[None, None, None]).await.unwrap_err();
    assert!(
        matches!(&status, Status::DeadlineExceeded(message) if message.contains("timed out")),
        "{status:?}"
    );
    assert_eq!(calls.count(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(3 * 1000 + 2 * 100));
}
