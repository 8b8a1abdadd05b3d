//! The `two_instances` example's run, checked: its printout is the shared-state story that
//! `resil::guide::many_instances` tells (real redis-server, real HTTP over loopback, real
//! time: about 15 s).
#![cfg(feature = "redis")]

#[tokio::test]
async fn the_two_instances_example_shows_what_it_claims() {
    let Some(report) = resil_lab::two_instances::run().await.unwrap() else {
        return;
    };
    assert!(
        report.unsettled.is_empty(),
        "never happened within 15 s: {:?}",
        report.unsettled
    );
    assert_eq!(report.outage_requests_a, 3, "{report:?}");
    assert!(report.b_opened_by_a, "{report:?}");
    assert_eq!(
        report.outage_requests_b, 0,
        "B rejects without calling: {report:?}"
    );
    assert_eq!(report.probes, 1, "one probe for both instances: {report:?}");
    // 2 s at 10/s with a burst of 1 is 21; two unshared gates would let ~40 through.
    assert!(report.gated_requests < 30, "{report:?}");
    assert_eq!(report.calls_without_redis.1, 0, "fail-open: {report:?}");
    // Each at its share (5/s, having seen the other): about 20, not ~40.
    assert!(report.ungated_requests < 30, "{report:?}");
    assert_eq!(report.window, (6, true), "{report:?}");
    assert!(report.resynced, "{report:?}");
    assert_eq!(
        report.resync.0, 1000,
        "every opening made during the outage reaches Redis: {report:?}"
    );
    // The guide's 0.6 µs against 63 µs (release build): a shared gate adds a round trip.
    let (local, shared) = report.gate_cost;
    assert!(shared > local, "{report:?}");
    let said = |what: &str| {
        (report.store_events.iter())
            .filter(|event| event.starts_with(what))
            .count()
    };
    assert_eq!(
        (said("unavailable"), said("restored")),
        (2, 2),
        "{report:?}"
    );
}
