//! `#[derive(Transient)]` on enums and structs.
#![allow(dead_code)]

use std::time::Duration;

use resil::{Rejected, Transient};

#[derive(Debug, Transient)]
enum Provider {
    #[transient]
    Busy,
    #[transient(retry_after = wait)]
    Limited {
        wait: Option<Duration>,
        message: String,
    },
    #[transient(retry_after = 1)]
    Throttled(String, Duration),
    Unauthorized,
    BadRequest {
        reason: String,
    },
    #[transient(transparent)]
    Rejected(Rejected),
    #[transient(transparent)]
    Io {
        source: std::io::Error,
    },
}

#[test]
fn enum_variants() {
    assert!(Provider::Busy.is_transient());
    assert_eq!(Provider::Busy.retry_after(), None);
    let limited = Provider::Limited {
        wait: Some(Duration::from_secs(2)),
        message: String::new(),
    };
    assert!(limited.is_transient());
    assert_eq!(limited.retry_after(), Some(Duration::from_secs(2)));
    let throttled = Provider::Throttled("slow down".into(), Duration::from_millis(500));
    assert_eq!(throttled.retry_after(), Some(Duration::from_millis(500)));
    assert!(!Provider::Unauthorized.is_transient());
    assert!(!Provider::BadRequest { reason: "x".into() }.is_transient());
    let open = Provider::Rejected(Rejected::BreakerOpen {
        breaker: "b".into(),
        retry_in: Duration::from_secs(9),
    });
    assert!(!open.is_transient());
    assert_eq!(open.retry_after(), Some(Duration::from_secs(9)));
    assert!(Provider::Rejected(Rejected::Timeout {
        after: Duration::from_secs(1)
    })
    .is_transient());
    let reset = Provider::Io {
        source: std::io::ErrorKind::ConnectionReset.into(),
    };
    assert!(reset.is_transient());
    let missing = Provider::Io {
        source: std::io::ErrorKind::NotFound.into(),
    };
    assert!(!missing.is_transient());
}

#[derive(Debug, Transient)]
#[transient(retry_after = retry_in)]
struct Overloaded {
    retry_in: Duration,
}

#[derive(Debug, Transient)]
struct Invalid;

#[derive(Debug, Transient)]
#[transient(transparent)]
struct Wrapped(std::io::Error);

#[derive(Debug, Transient)]
enum Generic<E: Transient> {
    #[transient(transparent)]
    Inner(E),
    Other,
}

#[test]
fn structs_and_generics() {
    let overloaded = Overloaded {
        retry_in: Duration::from_secs(4),
    };
    assert!(overloaded.is_transient());
    assert_eq!(overloaded.retry_after(), Some(Duration::from_secs(4)));
    assert!(!Invalid.is_transient());
    assert!(Wrapped(std::io::ErrorKind::TimedOut.into()).is_transient());
    assert!(Generic::Inner(Provider::Busy).is_transient());
    assert!(!Generic::<Provider>::Other.is_transient());
}

/// Throttles, and a status field that decides (feature `http`).
#[cfg(feature = "http")]
mod statuses {
    use super::*;
    use resil::http::{HttpError, StatusCode};

    #[derive(Debug, Transient)]
    enum Gateway {
        /// A 429: retried after its wait, never counted toward opening a breaker.
        #[transient(throttle, retry_after = wait)]
        TooFast { wait: Duration },
        /// One variant for every status: the status decides.
        #[transient(by = status, retry_after = retry_after)]
        Status {
            status: StatusCode,
            retry_after: Option<Duration>,
        },
        #[transient(transparent)]
        Http(HttpError),
    }

    #[test]
    fn throttles_and_statuses_that_decide() {
        let too_fast = Gateway::TooFast {
            wait: Duration::from_secs(1),
        };
        assert!(too_fast.is_transient() && too_fast.is_throttle());
        assert_eq!(too_fast.retry_after(), Some(Duration::from_secs(1)));
        let status = |code: u16| Gateway::Status {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert!(status(429).is_transient() && status(429).is_throttle());
        assert!(status(503).is_transient() && !status(503).is_throttle());
        assert!(!status(401).is_transient() && !status(401).is_throttle());
        assert_eq!(status(503).retry_after(), Some(Duration::from_secs(3)));
        let quota = Gateway::Http(HttpError {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: None,
            body: r#"{"error":{"code":"insufficient_quota"}}"#.into(),
        });
        assert!(!quota.is_transient() && !quota.is_throttle());
        assert!(!Provider::Busy.is_throttle());
    }
}
