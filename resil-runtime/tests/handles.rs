//! Handles for operators: a snapshot of every breaker, and reset / force-open with events.
//! Its own test binary: it sets the process-wide listener.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Recorder, TestError};
use resil_runtime::breaker::{self, BreakerStatus};
use resil_runtime::{events, BreakerState, Policy, Rejected};

fn status(name: &str) -> BreakerStatus {
    breaker::breakers()
        .into_iter()
        .find(|status| &*status.name == name)
        .unwrap_or_else(|| panic!("{name} is not in the snapshot"))
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_the_overrides_and_their_events() {
    let recorder = Recorder::new();
    events::add_global_listener(Arc::clone(&recorder) as _);
    let named = Policy::builder()
        .breaker_named("handles-named", 2, Duration::from_secs(30))
        .build()
        .unwrap();
    let keyed = Policy::builder()
        .breaker_per_key("handles-model", 1, Duration::from_secs(30))
        .build()
        .unwrap();

    let failed: Result<u32, TestError> = named.run(|| async { Err(TestError::Busy) }).await;
    assert_eq!(failed, Err(TestError::Busy));
    let failed: Result<u32, TestError> = keyed
        .run_keyed("dead", || async { Err(TestError::Busy) })
        .await;
    assert_eq!(failed, Err(TestError::Busy));
    let ok: Result<u32, TestError> = keyed.run_keyed("alive", || async { Ok(1) }).await;
    assert_eq!(ok, Ok(1));

    let shared = status("handles-named");
    assert_eq!(
        (shared.state, shared.failures, shared.key),
        (BreakerState::Closed, 1, None)
    );
    let dead = status("handles-model=dead");
    assert_eq!(dead.state, BreakerState::Open);
    assert_eq!(dead.key.as_deref(), Some("dead"));
    assert_eq!(dead.retry_in, Duration::from_secs(30));
    assert_eq!(status("handles-model=alive").state, BreakerState::Closed);

    // A maintenance window: forced open, it stays open past any cooldown.
    shared.breaker.force_open();
    tokio::time::advance(Duration::from_secs(3600)).await;
    let refused: Result<u32, TestError> = named.run(|| async { Ok(1) }).await;
    assert!(
        matches!(refused, Err(TestError::Rejected(Rejected::BreakerOpen { retry_in, .. })) if retry_in == Duration::MAX),
        "{refused:?}"
    );
    let forced = status("handles-named");
    assert!(forced.forced_open && forced.state == BreakerState::Open);

    // The provider is back: reset closes the breaker, named or per key.
    shared.breaker.reset();
    breaker::find("handles-model=dead").unwrap().reset();
    let served: Result<u32, TestError> = named.run(|| async { Ok(2) }).await;
    assert_eq!(served, Ok(2));
    assert_eq!(status("handles-model=dead").state, BreakerState::Closed);

    let lines = recorder.lines();
    let overrides: Vec<_> = lines
        .iter()
        .filter(|line| line.contains("handles-named") || line.contains("handles-model=dead"))
        .collect();
    assert_eq!(
        overrides,
        [
            "breaker handles-model=dead closed -> open",
            "BreakerOverridden { breaker: \"handles-named\", action: ForcedOpen }",
            "breaker handles-named closed -> open",
            "BreakerOverridden { breaker: \"handles-named\", action: Reset }",
            "breaker handles-named open -> closed",
            "BreakerOverridden { breaker: \"handles-model=dead\", action: Reset }",
            "breaker handles-model=dead open -> closed",
        ]
    );

    drop(keyed);
    assert!(
        breaker::find("handles-model=alive").is_none(),
        "a dropped policy's breakers leave the snapshot"
    );
}
