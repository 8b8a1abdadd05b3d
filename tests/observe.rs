//! The `observe` example's service over loopback and real time (about 3 s): what `/health`
//! and `/metrics` show before, during and after an outage, and under an operator's override.
//! Its own test binary: it installs the process-wide Prometheus recorder.

use resil_lab::observe::run;

fn breaker<'h>(health: &'h serde_json::Value, name: &str) -> &'h serde_json::Value {
    health["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|breaker| breaker["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {health}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_follow_the_outage() {
    let phases = run().await.unwrap();
    let answered: Vec<_> = phases.iter().map(|p| (p.answered, p.sent)).collect();
    assert_eq!(answered, [(5, 5), (0, 10), (3, 3), (0, 2)]);
    let health: Vec<serde_json::Value> = phases
        .iter()
        .map(|phase| serde_json::from_str(&phase.health).unwrap())
        .collect();
    let state = |phase: usize, name: &str| breaker(&health[phase], name)["state"].clone();
    assert_eq!(state(0, "model=gpt"), "closed");
    assert_eq!(state(1, "model=gpt"), "open");
    assert_eq!(state(1, "model=claude"), "closed");
    assert_eq!(state(2, "model=gpt"), "closed");
    assert_eq!(state(3, "model=claude"), "open");
    assert_eq!(breaker(&health[3], "model=claude")["forced_open"], true);
    assert!(breaker(&health[3], "model=claude")["retry_in_ms"].is_null());

    let series = |phase: usize, prefix: &str| {
        phases[phase]
            .metrics
            .iter()
            .find(|line| line.starts_with(prefix))
            .cloned()
            .unwrap_or_else(|| panic!("{prefix} missing from {:?}", phases[phase].metrics))
    };
    assert!(series(1, r#"resil_breaker_state{breaker="model",key="gpt"}"#).ends_with(" 2"));
    assert!(series(2, r#"resil_breaker_state{breaker="model",key="gpt"}"#).ends_with(" 0"));
    assert!(series(
        0,
        r#"resil_calls_total{fn="resil_lab::observe::complete",outcome="ok"}"#
    )
    .ends_with(" 5"));
    assert!(phases[0]
        .metrics
        .iter()
        .all(|line| !line.starts_with("resil_stream_first_item_seconds")));
}
