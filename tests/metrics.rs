//! Feature `metrics`: what one flaky call, an opened breaker and a fallback report, read back
//! with metrics-util's debugging recorder.
#![cfg(feature = "metrics")]

mod support;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::CompositeKey;
use resil::resilient;
use support::{ApiError, Calls};

/// What the recorder held after a run: one snapshot (taking one drains the recorder).
type Snapshot = Vec<(CompositeKey, DebugValue)>;

/// Runs `body` on a paused current-thread runtime with a debugging recorder as the local
/// recorder, and takes what it recorded.
fn recorded(body: impl std::future::Future<Output = ()>) -> Snapshot {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(body));
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key, value))
        .collect()
}

/// The value of metric `name` whose labels include every one of `labels`.
fn value<'s>(
    snapshot: &'s Snapshot,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'s DebugValue> {
    snapshot
        .iter()
        .find(|(key, _)| {
            let key = key.key();
            key.name() == name
                && labels.iter().all(|(k, v)| {
                    key.labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .map(|(_, value)| value)
}

#[resilient(retry = 2, backoff = "1ms..1ms")]
async fn flaky(calls: &Calls) -> Result<u32, ApiError> {
    if calls.add() < 3 {
        return Err(ApiError::Busy);
    }
    Ok(7)
}

#[test]
fn a_flaky_call_counts_one_call_three_attempts_two_retries() {
    let snapshot = recorded(async {
        let calls = Calls::default();
        assert_eq!(flaky(&calls).await, Ok(7));
    });
    let name = "metrics::flaky";
    let fn_label = |metric: &str| value(&snapshot, metric, &[("fn", name)]);
    assert!(matches!(
        fn_label("resil_attempts_total"),
        Some(DebugValue::Counter(3))
    ));
    assert!(matches!(
        fn_label("resil_retries_total"),
        Some(DebugValue::Counter(2))
    ));
    assert!(matches!(
        value(
            &snapshot,
            "resil_calls_total",
            &[("fn", name), ("outcome", "ok")]
        ),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        fn_label("resil_operation_seconds"),
        Some(DebugValue::Histogram(values)) if values.len() == 1
    ));
    assert!(
        fn_label("resil_stream_first_item_seconds").is_none(),
        "no stream, no first-item series"
    );
    assert!(
        fn_label("resil_bulkhead_in_use").is_none(),
        "no bulkhead, no gauge"
    );
}

#[resilient(first_item_timeout = "1s", retry = 1)]
async fn streaming() -> Result<impl futures::Stream<Item = Result<u32, ApiError>>, ApiError> {
    use futures::StreamExt;
    Ok(futures::stream::iter([1, 2]).then(|n| async move {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        Ok(n)
    }))
}

#[test]
fn a_stream_reports_the_time_to_its_first_item() {
    use futures::StreamExt;
    let snapshot = recorded(async {
        let items: Vec<_> = streaming().await.unwrap().collect().await;
        assert_eq!(items, [Ok(1), Ok(2)]);
    });
    assert!(matches!(
        value(&snapshot, "resil_stream_first_item_seconds", &[("fn", "metrics::streaming")]),
        Some(DebugValue::Histogram(values)) if values.len() == 1 && values[0].into_inner() == 0.25
    ));
}

#[resilient(breaker = "per_model", breaker_threshold = 1, bulkhead = 4)]
async fn dead(model: &str) -> Result<u32, ApiError> {
    let _ = model;
    Err(ApiError::Busy)
}

#[test]
fn an_opened_breaker_shows_in_its_gauge_and_the_outcomes() {
    let snapshot = recorded(async {
        assert_eq!(dead("gpt").await, Err(ApiError::Busy));
        assert!(dead("gpt").await.is_err());
    });
    assert!(matches!(
        value(&snapshot, "resil_breaker_state", &[("breaker", "model"), ("key", "gpt")]),
        Some(DebugValue::Gauge(state)) if state.into_inner() == 2.0
    ));
    assert!(matches!(
        value(
            &snapshot,
            "resil_calls_total",
            &[("outcome", "breaker_open")]
        ),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        value(&snapshot, "resil_calls_total", &[("outcome", "error")]),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        value(&snapshot, "resil_bulkhead_in_use", &[("fn", "metrics::dead")]),
        Some(DebugValue::Gauge(in_use)) if in_use.into_inner() == 0.0
    ));
}

#[resilient(retry = 1, breaker = "per_model", breaker_threshold = 1, route = model in ["claude"])]
async fn routed(model: &str) -> Result<u32, ApiError> {
    match model {
        "gpt" => Err(ApiError::Busy),
        _ => Ok(1),
    }
}

#[test]
fn a_route_counts_what_it_sent_and_skipped_per_target() {
    let snapshot = recorded(async {
        assert_eq!(routed("gpt").await, Ok(1));
        // gpt's breaker is open: skipped.
        assert_eq!(routed("gpt").await, Ok(1));
    });
    let route = |target, outcome| {
        value(
            &snapshot,
            "resil_route_total",
            &[("target", target), ("outcome", outcome)],
        )
    };
    assert!(matches!(route("gpt", "sent"), Some(DebugValue::Counter(1))));
    assert!(matches!(
        route("gpt", "skipped"),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        route("claude", "sent"),
        Some(DebugValue::Counter(2))
    ));
}

#[resilient(timeout = "10s", retry = 1, breaker = "per_model", breaker_threshold = 1,
            hedge = "1 after 800ms", route = model in ["claude"])]
async fn routed_hedged(model: &str) -> Result<u32, ApiError> {
    match model {
        "gpt" => {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Ok(1)
        }
        _ => Err(ApiError::Busy),
    }
}

#[test]
fn a_hedge_kept_on_the_same_target_counts_as_sent() {
    let snapshot = recorded(async {
        // claude fails: its breaker opens, and gpt's hedge stays on gpt.
        assert_eq!(routed_hedged("claude").await, Err(ApiError::Busy));
        assert_eq!(routed_hedged("gpt").await, Ok(1));
    });
    let route = |target, outcome| {
        value(
            &snapshot,
            "resil_route_total",
            &[("target", target), ("outcome", outcome)],
        )
    };
    assert!(
        matches!(route("gpt", "sent"), Some(DebugValue::Counter(2))),
        "{:?}",
        route("gpt", "sent")
    );
}

#[resilient(breaker = "per_model", route = model in ["claude"])]
async fn routed_widely(model: &str) -> Result<u32, ApiError> {
    let _ = model;
    Ok(1)
}

#[test]
fn a_route_counts_every_target_past_those_whose_counters_it_keeps() {
    let snapshot = recorded(async {
        for n in 0..1100 {
            assert_eq!(routed_widely(&format!("m{n}")).await, Ok(1));
        }
        assert_eq!(routed_widely("m0").await, Ok(1));
        assert_eq!(routed_widely("m1099").await, Ok(1));
    });
    let sent = |target: &str| {
        value(
            &snapshot,
            "resil_route_total",
            &[("target", target), ("outcome", "sent")],
        )
    };
    assert!(matches!(sent("m0"), Some(DebugValue::Counter(2))));
    assert!(matches!(sent("m500"), Some(DebugValue::Counter(1))));
    assert!(
        matches!(sent("m1099"), Some(DebugValue::Counter(2))),
        "a target past the kept ones"
    );
}

#[resilient(retry = 1, backoff = "1ms..1ms", fallback = cached)]
async fn with_fallback(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

async fn cached(_calls: &Calls) -> Result<u32, ApiError> {
    Ok(0)
}

#[test]
fn a_failure_served_by_the_fallback_counts_as_fallback() {
    let snapshot = recorded(async {
        assert_eq!(with_fallback(&Calls::default()).await, Ok(0));
    });
    assert!(matches!(
        value(&snapshot, "resil_calls_total", &[("outcome", "fallback")]),
        Some(DebugValue::Counter(1))
    ));
    assert!(matches!(
        value(&snapshot, "resil_calls_total", &[("outcome", "error")]),
        Some(DebugValue::Counter(0))
    ));
}

/// A shared store that does not answer sets `resil_shared_available{store}` to 0 (the URL
/// without its password).
#[cfg(feature = "redis")]
#[test]
fn an_unreachable_shared_store_reads_as_unavailable() {
    let snapshot = recorded(async {
        let store = resil::shared::Redis::open("redis://:secret@127.0.0.1:1/")
            .await
            .unwrap();
        assert!(!store.is_available());
    });
    let gauge = value(
        &snapshot,
        "resil_shared_available",
        &[("store", "redis://***@127.0.0.1:1/")],
    );
    assert!(
        matches!(gauge, Some(DebugValue::Gauge(up)) if up.into_inner() == 0.0),
        "{snapshot:?}"
    );
}

/// A shared limit that fails closed counts its refusals as their own outcome.
#[cfg(feature = "redis")]
#[test]
fn a_refusal_failing_closed_is_its_own_outcome() {
    let snapshot = recorded(async {
        let store = resil::shared::Redis::open("redis://127.0.0.1:1/")
            .await
            .unwrap();
        let policy = resil::Policy::builder()
            .name("shared::closed")
            .rate(10, std::time::Duration::from_secs(1), 10)
            .shared_in(&store)
            .shared_fail_closed(true)
            .build()
            .unwrap();
        let refused = policy.run(|| async { Ok::<(), resil::Rejected>(()) }).await;
        assert_eq!(refused, Err(resil::Rejected::SharedUnavailable));
    });
    let counted = value(
        &snapshot,
        "resil_calls_total",
        &[("fn", "shared::closed"), ("outcome", "shared_unavailable")],
    );
    assert!(
        matches!(counted, Some(DebugValue::Counter(1))),
        "{snapshot:?}"
    );
}

#[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
async fn slow_hedged(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    Ok(1)
}

#[test]
fn every_hedge_counts_once_its_race_ends_or_is_dropped() {
    let calls = Calls::default();
    let snapshot = recorded(async {
        // Both racers take 5 s: the first wins, its hedge lost.
        assert_eq!(slow_hedged(&calls).await, Ok(1));
        // A race the caller drops at 2 s: its hedge, started at 800 ms, lost too.
        let cut = tokio::time::timeout(std::time::Duration::from_secs(2), slow_hedged(&calls));
        assert!(cut.await.is_err());
    });
    assert_eq!(calls.count(), 4, "each race started its hedge");
    assert!(matches!(
        value(&snapshot, "resil_hedges_total", &[("outcome", "lost")]),
        Some(DebugValue::Counter(2))
    ));
    assert!(value(&snapshot, "resil_hedges_total", &[("outcome", "won")]).is_none());
}

/// Each answer says 4 calls of 10 are left for the next second.
#[resilient(rate = "auto per key", key = model)]
async fn learning(model: &str) -> Result<u32, ApiError> {
    let _ = model;
    let left = resil::Quota {
        limit: Some(10),
        remaining: 4,
        reset: std::time::Duration::from_secs(1),
        window: None,
    };
    resil::operation::report_limits(resil::ProviderLimits {
        requests: Some(left),
        tokens: None,
    });
    Ok(1)
}

/// A learning gate's rate shows in `resil_rate_learnt{fn, key, gate}`, per key.
#[test]
fn a_learnt_rate_shows_in_its_gauge_per_key() {
    let snapshot = recorded(async {
        learning("gpt-4o").await.unwrap();
    });
    let gauge = value(
        &snapshot,
        "resil_rate_learnt",
        &[("key", "gpt-4o"), ("gate", "rate")],
    );
    // 10 in a window of a second: 10 a second.
    assert!(
        matches!(gauge, Some(DebugValue::Gauge(rate)) if (rate.into_inner() - 10.0).abs() < 0.01),
        "{snapshot:?}"
    );
}

#[resilient(rate = "10/s", bulkhead = 1, bulkhead_queue = 10, priority = class)]
async fn in_turn(class: resil::Priority) -> Result<u32, ApiError> {
    let _ = class;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    Ok(1)
}

/// Calls that waited in turn show in `resil_wait_seconds{fn, wait, class, promoted}`, by what
/// they waited for and by class; the first call, which did not wait, is in none of them.
#[test]
fn waits_in_turn_show_per_class() {
    use resil::Priority;
    let snapshot = recorded(async {
        let calls = [Priority::Batch, Priority::Batch, Priority::Critical];
        let all = futures::future::join_all(calls.map(in_turn)).await;
        assert!(all.iter().all(Result::is_ok));
    });
    let waits = |class: &str| match value(
        &snapshot,
        "resil_wait_seconds",
        &[
            ("wait", "bulkhead"),
            ("class", class),
            ("promoted", "false"),
        ],
    ) {
        Some(DebugValue::Histogram(waits)) => waits.iter().map(|w| w.into_inner()).collect(),
        _ => Vec::new(),
    };
    // The first batch call went at once; the critical call took the place it freed at
    // 500 ms, the second batch call the next at 1 s.
    assert_eq!(waits("critical"), [0.5], "{snapshot:?}");
    assert_eq!(waits("batch"), [1.0], "{snapshot:?}");
    assert!(waits("default").is_empty());
    // A wait it has no gate for shows no series.
    let tokens = value(&snapshot, "resil_wait_seconds", &[("wait", "token_rate")]);
    assert!(tokens.is_none(), "{snapshot:?}");
}
