//! The expansion refers to everything by absolute path: a local `core` module and shadowed
//! `Result`, `Ok`, `Err`, `Some`, `None` and `Duration` change nothing.
#![allow(dead_code, non_camel_case_types)]

mod support;

mod core {}
mod std {}

type Result<T> = ::core::result::Result<T, support::ApiError>;
struct Ok;
struct Err;
struct Some;
struct None;
struct Duration;
struct LazyLock;
struct Policy;

#[::resil::resilient(timeout = "1s", retry = 1, breaker = "per_key", bulkhead = 2, fallback = backup)]
async fn shadowed(key: &str, value: ::std::string::String) -> Result<usize> {
    let _ = key;
    ::core::result::Result::Ok(value.len())
}

async fn backup(_key: &str, _value: ::std::string::String) -> Result<usize> {
    ::core::result::Result::Ok(0)
}

#[derive(Debug, ::resil::Transient)]
enum Shadowed {
    #[transient(retry_after = wait)]
    Limited {
        wait: ::core::option::Option<::core::time::Duration>,
    },
}

#[::tokio::test]
async fn expansion_is_hygienic() {
    ::core::assert_eq!(shadowed("k", "four".into()).await.unwrap(), 4);
    let limited = Shadowed::Limited {
        wait: ::core::option::Option::None,
    };
    ::core::assert!(::resil::Transient::is_transient(&limited));
}
