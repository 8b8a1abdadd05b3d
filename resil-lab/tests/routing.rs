//! The `routing` example's table, against mock providers on loopback and real time (about
//! 8 s: C's slow answers take their 5 s).
//!
//! The counts are exact: the requests start one after another (each once the one before has
//! its headers or its outcome), so the breakers, gates and the mock's counters see them in one
//! order; the 503s, the quota and the slow tail are the mock's own, by count. The one
//! real-time margin: the 10 s deadline against the 5 s tail and a run of a few seconds, and
//! B's 60 s hold against the same run.

use resil_lab::routing::{run, Way, REQUESTS, TAIL};

#[tokio::test]
async fn a_route_serves_every_request_without_calling_the_down_or_throttled_model() {
    let rows = run().await.unwrap();
    let [direct, routed] = &rows[..] else {
        panic!("two rows, got {rows:?}")
    };
    assert_eq!((direct.way, routed.way), (Way::Direct, Way::Routed));

    // A: 3 calls open its breaker (request 0 and its 2 retries without a route; requests 0,
    // 3 and 6, each moving on to B, with one). B: its quota of 20, then one 429, whose hold
    // closes B's gate for the rest of the run. Neither is called again.
    assert_eq!(direct.sent, [3, 21, 66]);
    assert_eq!(routed.sent, [3, 21, 180]);

    // Without a route every request whose first choice is A or B fails but B's first 20.
    let failed = |row: &resil_lab::routing::Row, kind: &str| row.failed.get(kind).copied();
    assert_eq!((direct.ok, direct.failures()), (86, 114));
    assert_eq!(failed(direct, "503"), Some(1));
    assert_eq!(failed(direct, "breaker_open"), Some(66));
    assert_eq!(failed(direct, "429"), Some(1));
    assert_eq!(failed(direct, "rate_limited"), Some(46));
    // With one, every request gets its answer.
    assert_eq!((routed.ok, routed.failures()), (REQUESTS as u32, 0));

    // Time to the first token: the route cuts none of C's tail, and sends C more of it (18
    // slow answers of 200 against 6 of 86): both p99s are the tail, both medians far below.
    for row in [direct, routed] {
        assert!(row.p99 >= TAIL.1, "{row:?}");
        assert!(row.p50 < TAIL.1 / 5, "{row:?}");
    }
}
