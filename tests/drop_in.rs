//! Errors resil does not own, through the attribute: a boxed `dyn Error` and (feature
//! `anyhow`) an `anyhow::Error` are classified by the first error of their chain that resil
//! can classify, a type of the program that derives `Transient` included.

mod support;

use std::error::Error;
use std::io;
use std::time::Duration;

use resil::{resilient, Rejected, Transient};
use support::Calls;
use tokio::time::Instant;

/// A provider's error, as an application declares it and then wraps it in context.
#[derive(Debug, thiserror::Error, Transient)]
enum ProviderError {
    #[error("provider busy")]
    #[transient]
    Busy,
    #[error("slow down")]
    #[transient(throttle, retry_after = wait)]
    SlowDown { wait: Duration },
    #[error("context too long")]
    #[transient(route)]
    TooLong,
    #[error("bad request")]
    BadRequest,
}

/// The nth call fails with what `fail` makes, until `failures` calls have failed.
fn failing<E>(calls: &Calls, failures: u32, fail: impl Fn() -> E) -> Result<u32, E> {
    let n = calls.add();
    if n <= failures {
        return Err(fail());
    }
    Ok(n)
}

type BoxError = Box<dyn Error + Send + Sync>;

#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn boxed_call(calls: &Calls, fail: fn() -> BoxError) -> Result<u32, BoxError> {
    failing(calls, 1, fail)
}

/// A boxed error written as without the attribute: `Err(Box::new(e))`, `return`ed or last,
/// and `"...".into()`, each coerced to the function's error type (they failed to compile, the
/// body's block typed by its first error).
#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn boxed_as_written(calls: &Calls, bad: bool) -> Result<u32, BoxError> {
    if bad {
        return Err("no such model".into());
    }
    let n = calls.add();
    if n < 2 {
        return Err(Box::new(io::Error::from(io::ErrorKind::ConnectionReset)));
    }
    match n {
        2 => Ok(n),
        _ => Err(Box::new(io::Error::from(io::ErrorKind::InvalidData))),
    }
}

/// A one-line body draws no `unused_braces`, and one that ends in `return` no
/// `unreachable_code`, from what the attribute wraps around it.
#[deny(unused_braces, unreachable_code)]
#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
#[rustfmt::skip]
async fn one_line(calls: &Calls) -> Result<u32, BoxError> { Ok(calls.add()) }

#[deny(unused_braces, unreachable_code)]
#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
#[allow(clippy::needless_return)]
async fn returns_last(calls: &Calls) -> Result<u32, BoxError> {
    return Ok(calls.add());
}

#[tokio::test(start_paused = true)]
async fn a_boxed_error_written_as_without_the_attribute_compiles_and_is_classified() {
    let calls = Calls::default();
    assert_eq!(boxed_as_written(&calls, false).await.unwrap(), 2);
    assert!(boxed_as_written(&calls, true).await.is_err());
    assert_eq!(one_line(&calls).await.unwrap(), 3);
    assert_eq!(returns_last(&calls).await.unwrap(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_boxed_error_is_classified_by_its_chain() {
    let calls = Calls::default();
    let reset = || BoxError::from(io::Error::from(io::ErrorKind::ConnectionReset));
    assert_eq!(boxed_call(&calls, reset).await.unwrap(), 2);

    let calls = Calls::default();
    let started = Instant::now();
    let slow = || {
        BoxError::from(ProviderError::SlowDown {
            wait: Duration::from_secs(7),
        })
    };
    assert_eq!(boxed_call(&calls, slow).await.unwrap(), 2);
    assert_eq!(started.elapsed(), Duration::from_secs(7));

    let calls = Calls::default();
    let bad = || BoxError::from(ProviderError::BadRequest);
    let error = boxed_call(&calls, bad).await.unwrap_err();
    assert_eq!(calls.count(), 1);
    assert!(error.downcast_ref::<ProviderError>().is_some());

    let calls = Calls::default();
    boxed_call(&calls, || "no such model".into())
        .await
        .unwrap_err();
    assert_eq!(calls.count(), 1, "a message is permanent");
}

#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn io_call(calls: &Calls, fail: fn() -> io::Error) -> Result<u32, io::Error> {
    failing(calls, 1, fail)
}

/// `io::Error::other(e)` (a program's own error through an io interface): its `source()`
/// passes over `e`, which decides all the same.
#[tokio::test(start_paused = true)]
async fn an_io_error_wrapping_a_programs_error_is_classified_by_it() {
    let calls = Calls::default();
    let started = Instant::now();
    let slow = || {
        io::Error::other(ProviderError::SlowDown {
            wait: Duration::from_secs(7),
        })
    };
    assert_eq!(io_call(&calls, slow).await.unwrap(), 2);
    assert_eq!(started.elapsed(), Duration::from_secs(7));

    let calls = Calls::default();
    let busy = || BoxError::from(io::Error::other(ProviderError::Busy));
    assert_eq!(boxed_call(&calls, busy).await.unwrap(), 2);

    let calls = Calls::default();
    let bad = || io::Error::other(ProviderError::BadRequest);
    io_call(&calls, bad).await.unwrap_err();
    assert_eq!(calls.count(), 1, "what it wraps is permanent");
}

/// Slower than its timeout, whatever its error type.
#[resilient(timeout = "1s", retry = 1)]
async fn slow<E: Transient + From<Rejected>>(calls: &Calls) -> Result<u32, E> {
    calls.add();
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(0)
}

#[tokio::test(start_paused = true)]
async fn an_io_error_carries_a_timeout_which_is_retried() {
    let calls = Calls::default();
    let error = slow::<io::Error>(&calls).await.unwrap_err();
    assert_eq!(calls.count(), 2);
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);
    let rejected = error.get_ref().and_then(|e| e.downcast_ref::<Rejected>());
    assert!(
        matches!(rejected, Some(Rejected::Timeout { .. })),
        "{error:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_boxed_timeout_is_retried_and_reaches_the_caller_as_rejected() {
    let calls = Calls::default();
    let error = slow::<BoxError>(&calls).await.unwrap_err();
    assert_eq!(calls.count(), 2);
    assert!(matches!(
        error.downcast_ref::<Rejected>(),
        Some(Rejected::Timeout { .. })
    ));
}

#[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn local_boxed_call(
    calls: &Calls,
    fail: fn() -> Box<dyn Error>,
) -> Result<u32, Box<dyn Error>> {
    failing(calls, 1, fail)
}

#[tokio::test(start_paused = true)]
async fn a_box_of_an_error_that_is_not_send_is_classified_the_same() {
    let calls = Calls::default();
    let busy = || Box::<dyn Error>::from(ProviderError::Busy);
    assert_eq!(local_boxed_call(&calls, busy).await.unwrap(), 2);
    let calls = Calls::default();
    let bad = || Box::<dyn Error>::from(ProviderError::BadRequest);
    local_boxed_call(&calls, bad).await.unwrap_err();
    assert_eq!(calls.count(), 1);
}

type SendError = Box<dyn Error + Send>;

#[resilient(timeout = "1s", retry = 2, backoff = "100ms..100ms", jitter = "none")]
async fn send_boxed_call(calls: &Calls, fail: fn() -> SendError) -> Result<u32, SendError> {
    if calls.count() == 0 {
        calls.add();
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    failing(calls, 2, fail)
}

#[tokio::test(start_paused = true)]
async fn a_box_of_an_error_that_is_send_only_carries_a_timeout_and_is_classified_the_same() {
    // A timeout (the first call), then busy (the second), then an answer.
    let calls = Calls::default();
    let busy = || Box::new(ProviderError::Busy) as SendError;
    let started = Instant::now();
    assert_eq!(send_boxed_call(&calls, busy).await.unwrap(), 3);
    assert_eq!(started.elapsed(), Duration::from_millis(1000 + 100 + 100));

    let calls = Calls::default();
    let bad = || Box::new(ProviderError::BadRequest) as SendError;
    let error = send_boxed_call(&calls, bad).await.unwrap_err();
    assert_eq!(
        calls.count(),
        2,
        "the timeout is retried, the bad request is not"
    );
    assert!(error.downcast_ref::<ProviderError>().is_some());
}

/// An error whose `Transient` is written by hand, listed for chains.
#[derive(Debug, thiserror::Error)]
#[error("the gateway is overloaded")]
struct Overloaded;

impl Transient for Overloaded {
    fn is_transient(&self) -> bool {
        true
    }
    fn retry_after(&self) -> Option<Duration> {
        Some(Duration::from_secs(3))
    }
}

resil::transient_in_chains!(Overloaded);

#[tokio::test(start_paused = true)]
async fn a_hand_written_transient_listed_for_chains_is_classified() {
    let calls = Calls::default();
    let started = Instant::now();
    let overloaded = || BoxError::from(Overloaded);
    assert_eq!(boxed_call(&calls, overloaded).await.unwrap(), 2);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "its wait is kept"
    );
}

/// `anyhow::Error`, with the feature.
#[cfg(feature = "anyhow")]
mod with_anyhow {
    use super::*;
    use anyhow::Context;

    #[resilient(retry = 2, backoff = "100ms..100ms", jitter = "none")]
    async fn anyhow_call(calls: &Calls, fail: fn() -> anyhow::Error) -> anyhow::Result<u32> {
        failing(calls, 1, fail)
    }

    fn reset() -> anyhow::Error {
        Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionReset))
            .context("reading the answer")
            .context("calling gpt")
            .unwrap_err()
    }

    #[tokio::test(start_paused = true)]
    async fn an_io_reset_under_context_is_retried() {
        let calls = Calls::default();
        assert_eq!(anyhow_call(&calls, reset).await.unwrap(), 2);
        assert_eq!(calls.count(), 2);
    }

    /// A `BoxError` (tower's, tonic's) turned into anyhow: anyhow wraps the box, and its
    /// wrapper's `source()` passes over the boxed error, which was never seen (permanent).
    #[tokio::test(start_paused = true)]
    async fn a_boxed_error_made_anyhow_says_what_the_box_says() {
        fn boxed(kind: io::ErrorKind) -> BoxError {
            io::Error::from(kind).into()
        }
        let resets: [fn() -> anyhow::Error; 3] = [
            || anyhow::anyhow!(boxed(io::ErrorKind::ConnectionReset)),
            || anyhow::Error::from_boxed(boxed(io::ErrorKind::ConnectionReset)),
            || anyhow::Error::from_boxed(boxed(io::ErrorKind::ConnectionReset)).context("gpt"),
        ];
        for reset in resets {
            let calls = Calls::default();
            assert_eq!(anyhow_call(&calls, reset).await.unwrap(), 2);
        }
        let calls = Calls::default();
        let denied = || anyhow::Error::from_boxed(boxed(io::ErrorKind::PermissionDenied));
        assert!(anyhow_call(&calls, denied).await.is_err());
        assert_eq!(calls.count(), 1, "what the box says is permanent stays so");
    }

    #[tokio::test(start_paused = true)]
    async fn a_derived_error_under_context_is_classified_by_its_variant() {
        let calls = Calls::default();
        let busy = || anyhow::Error::from(ProviderError::Busy).context("calling gpt");
        assert_eq!(
            anyhow_call(&calls, busy).await.unwrap(),
            2,
            "busy is retried"
        );

        let calls = Calls::default();
        let bad = || anyhow::Error::from(ProviderError::BadRequest).context("calling gpt");
        let error = anyhow_call(&calls, bad).await.unwrap_err();
        assert_eq!(calls.count(), 1, "a bad request is not");
        assert!(matches!(
            error.downcast_ref::<ProviderError>(),
            Some(ProviderError::BadRequest)
        ));

        let calls = Calls::default();
        let started = Instant::now();
        let slow = || {
            anyhow::Error::from(ProviderError::SlowDown {
                wait: Duration::from_secs(7),
            })
            .context("calling gpt")
        };
        assert_eq!(anyhow_call(&calls, slow).await.unwrap(), 2);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(7),
            "its wait is kept"
        );
    }

    #[test]
    fn a_derived_error_under_context_says_its_throttle_and_move_on() {
        let slow = anyhow::Error::from(ProviderError::SlowDown {
            wait: Duration::from_secs(7),
        })
        .context("calling gpt");
        assert!(slow.is_throttle());
        assert_eq!(slow.retry_after(), Some(Duration::from_secs(7)));
        let too_long = anyhow::Error::from(ProviderError::TooLong).context("calling gpt");
        assert!(too_long.moves_on() && !too_long.is_transient());
    }

    #[test]
    fn a_context_of_a_classifiable_type_is_passed_over_like_any_context() {
        // `.context(C)` is read as a message, whatever C: anyhow keeps the context in a
        // layer of a type of its own, which no walk of the chain can downcast to C. The
        // guide says to make a typed error the error (or its source), not the context.
        let slow = anyhow::anyhow!("HTTP 429").context(ProviderError::SlowDown {
            wait: Duration::from_secs(7),
        });
        assert!(
            slow.downcast_ref::<ProviderError>().is_some(),
            "anyhow finds it"
        );
        assert!(!slow.is_transient(), "resil does not");
        let reset = Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionReset))
            .context(ProviderError::BadRequest)
            .unwrap_err();
        assert!(reset.is_transient(), "the io error below decides");
    }

    #[tokio::test(start_paused = true)]
    async fn a_plain_anyhow_message_is_not_retried() {
        let calls = Calls::default();
        let error = anyhow_call(&calls, || anyhow::anyhow!("no such model"))
            .await
            .unwrap_err();
        assert_eq!(calls.count(), 1);
        assert_eq!(error.to_string(), "no such model");
    }

    #[resilient(timeout = "1s", retry = 1, backoff = "100ms..100ms", jitter = "none")]
    async fn anyhow_slow(calls: &Calls) -> anyhow::Result<u32> {
        calls.add();
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(0)
    }

    #[tokio::test(start_paused = true)]
    async fn an_anyhow_timeout_is_retried_and_reaches_the_caller_as_rejected() {
        let calls = Calls::default();
        let started = Instant::now();
        let error = anyhow_slow(&calls).await.unwrap_err();
        assert_eq!(calls.count(), 2, "the timeout was retried");
        assert_eq!(started.elapsed(), Duration::from_millis(2100));
        assert!(matches!(
            error.downcast_ref::<Rejected>(),
            Some(Rejected::Timeout { .. })
        ));
    }
}
