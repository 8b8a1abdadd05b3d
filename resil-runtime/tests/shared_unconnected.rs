//! A policy declared shared in a process that never connected a Redis store: it decides
//! locally, and says why once. (Its own test binary: the process's store stays unconnected.)
#![cfg(feature = "redis")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use resil_runtime::events::{self, Event, Listener};
use resil_runtime::shared::Redis;
use resil_runtime::{Policy, Rejected};

#[derive(Debug, Default)]
struct Reasons(Mutex<Vec<String>>);

impl Listener for Reasons {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::SharedUnavailable { reason, .. } = event {
            self.0.lock().unwrap().push((*reason).to_owned());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_store_the_local_gate_decides_and_says_so_once() {
    let reasons = Arc::new(Reasons::default());
    events::add_global_listener(Arc::clone(&reasons) as Arc<dyn Listener>);
    let policy = Policy::builder()
        .rate(2, Duration::from_secs(60), 2)
        .deadline(Duration::from_secs(1))
        .shared()
        .build()
        .unwrap();
    let mut passed = 0;
    for _ in 0..5 {
        if policy
            .run(|| async { Ok::<(), Rejected>(()) })
            .await
            .is_ok()
        {
            passed += 1;
        }
    }
    assert_eq!(passed, 2, "the local gate's limit");
    assert!(Redis::installed().is_none());
    let reasons = reasons.0.lock().unwrap();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains("Redis::connect"), "{reasons:?}");
}

#[test]
fn shared_settings_are_checked() {
    let nothing = Policy::builder()
        .timeout(Duration::from_secs(1))
        .shared()
        .build();
    assert!(nothing.unwrap_err().to_string().contains("has neither"));
    let slow = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .shared_timeout(Duration::from_secs(5))
        .build();
    assert!(slow.unwrap_err().to_string().contains("at most 1s"));
    let zero = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .shared_timeout(Duration::ZERO)
        .build();
    assert!(zero.unwrap_err().to_string().contains("shared_timeout"));
}
