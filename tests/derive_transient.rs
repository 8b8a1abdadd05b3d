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
