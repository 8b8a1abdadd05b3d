//! Feature `config`: every #[resilient] function is known to the configuration before its
//! first call, by its path; a file changes its limits at run time. Its own test binary:
//! configuration is process-wide.
#![cfg(feature = "config")]

mod support;

use std::time::Duration;

use resil::config::{self, Overrides};
use resil::{resilient, Rejected};
use support::ApiError;

#[resilient(timeout = "10s", retry = 2)]
async fn lookup() -> Result<(), ApiError> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn a_function_not_yet_called_is_configured_by_its_path() {
    let misspelt =
        Overrides::parse("[\"config::lokup\"]\ntimeout = \"1s\"\n", "resil.toml").unwrap();
    let refused = config::apply(&misspelt).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("did you mean `config::lookup`?"),
        "{refused}"
    );

    let file = "[\"config::lookup\"]\ntimeout = \"1s\"\nretry = 0\n";
    let changed = config::apply(&Overrides::parse(file, "resil.toml").unwrap()).unwrap();
    assert!(changed >= 1);
    let started = tokio::time::Instant::now();
    assert_eq!(
        lookup().await,
        Err(ApiError::Rejected(Rejected::Timeout {
            after: Duration::from_secs(1)
        }))
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(1),
        "one attempt of 1 s, not three of 10 s"
    );
}
