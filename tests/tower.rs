//! Feature `tower`: the retry storm through a tower stack makes the same calls as through the
//! attribute; a keyed layer keeps a breaker per what the request names.
#![cfg(feature = "tower")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use resil::tower::KeyedPolicyLayer;
use resil::{Policy, Rejected};
use resil_lab::retry_storm::{run, through_tower};
use resil_lab::LlmError;
use tower::{service_fn, ServiceBuilder, ServiceExt};

#[tokio::test(start_paused = true)]
async fn the_retry_storm_through_tower_makes_the_same_calls() {
    let attribute = run().await;
    let tower = through_tower().await;
    for row in &tower {
        let same = attribute.iter().find(|a| a.row == row.row).unwrap();
        assert_eq!(
            (row.calls, &row.outcomes),
            (same.calls, &same.outcomes),
            "row {}",
            row.row
        );
    }
    assert_eq!(
        tower.iter().map(|row| row.calls).collect::<Vec<_>>(),
        [300, 10]
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_layer_keeps_a_breaker_per_host() {
    let policy = Policy::builder()
        .breaker_per_key("host", 1, Duration::from_secs(30))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let service = ServiceBuilder::new()
        .layer(KeyedPolicyLayer::new(
            policy,
            |(host, _): &(String, u32)| host.clone(),
        ))
        .service(service_fn(move |(host, n): (String, u32)| {
            counted.fetch_add(1, Ordering::Relaxed);
            async move {
                if host == "down" {
                    Err(LlmError::Unavailable)
                } else {
                    Ok(n)
                }
            }
        }));
    let down = || service.clone().oneshot(("down".to_owned(), 1));
    assert_eq!(down().await, Err(LlmError::Unavailable));
    assert!(matches!(
        down().await,
        Err(LlmError::Rejected(Rejected::BreakerOpen { .. }))
    ));
    let up = service.clone().oneshot(("up".to_owned(), 7)).await;
    assert_eq!(up, Ok(7), "another host has its own breaker");
    assert_eq!(
        calls.load(Ordering::Relaxed),
        2,
        "the open breaker made no call"
    );
}

/// A layer's `ordered_by` reads each request's turn: on a `10/s` gate, a critical request
/// sent behind five batch requests goes second, and two tenants' batch requests alternate.
#[tokio::test(start_paused = true)]
async fn a_layer_orders_requests_by_what_they_carry() {
    use resil::{Order, Priority};
    let policy = Policy::builder()
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .fair()
        .build()
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let service = ServiceBuilder::new()
        .layer(resil::tower::PolicyLayer::new(policy).ordered_by(
            |request: &(&'static str, bool)| {
                let class = if request.1 {
                    Priority::Critical
                } else {
                    Priority::Batch
                };
                Order::new(class).fair(request.0)
            },
        ))
        .service(service_fn(move |request: (&'static str, bool)| {
            recorded.lock().unwrap().push(request.0);
            async { Ok::<_, Rejected>(()) }
        }));
    let requests = ["a", "a", "a", "a", "b"].map(|tenant| service.clone().oneshot((tenant, false)));
    let batch = futures::future::join_all(requests);
    let critical = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        service.clone().oneshot(("urgent", true)).await
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(*seen.lock().unwrap(), ["a", "urgent", "a", "b", "a", "a"]);
}

/// The keyed layer's `ordered_by` reads each request's turn within its key's gate: a critical
/// request to gpt sent behind four batch requests to gpt goes second, and claude's request,
/// its own gate's, goes at once.
#[tokio::test(start_paused = true)]
async fn a_keyed_layer_orders_each_keys_requests_by_what_they_carry() {
    use resil::{Order, Priority};
    let policy = Policy::builder()
        .rate(10, Duration::from_secs(1), 1)
        .by_priority()
        .keyed("model")
        .rate_per_key()
        .build()
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let layer =
        resil::tower::KeyedPolicyLayer::new(policy, |request: &(&'static str, &str)| request.0)
            .ordered_by(|request: &(&'static str, &str)| match request.1 {
                "urgent" => Order::new(Priority::Critical),
                _ => Order::new(Priority::Batch),
            });
    let service = ServiceBuilder::new().layer(layer).service(service_fn(
        move |request: (&'static str, &'static str)| {
            let at = tokio::time::Instant::now();
            recorded.lock().unwrap().push((request.0, request.1, at));
            async { Ok::<_, Rejected>(()) }
        },
    ));
    let origin = tokio::time::Instant::now();
    let batch =
        futures::future::join_all((0..4).map(|_| service.clone().oneshot(("gpt", "batch"))));
    let others = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let urgent = service.clone().oneshot(("gpt", "urgent"));
        let claude = service.clone().oneshot(("claude", "batch"));
        tokio::join!(urgent, claude)
    };
    let (batch, (urgent, claude)) = tokio::join!(batch, others);
    assert!(batch.iter().all(Result::is_ok) && urgent.is_ok() && claude.is_ok());
    let seen = seen.lock().unwrap();
    let gpt: Vec<&str> = seen.iter().filter(|s| s.0 == "gpt").map(|s| s.1).collect();
    assert_eq!(gpt, ["batch", "urgent", "batch", "batch", "batch"]);
    let claude = seen.iter().find(|s| s.0 == "claude").unwrap();
    assert_eq!(
        claude.2 - origin,
        Duration::from_millis(10),
        "claude's gate is its own"
    );
}
