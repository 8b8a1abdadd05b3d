//! The `routing` example's table, against mock providers on loopback and real time (about
//! 8 s: C's slow answers take their 5 s).
//!
//! The counts are exact: the requests start one after another (each once the one before has
//! its headers or its outcome), so the breakers, gates and the mock's counters see them in one
//! order; the 503s, the quota and the slow tail are the mock's own, by count. A hedge starts
//! 800 ms after its request, while later ones are starting: the mock counts it in a slow tail
//! of its own (a repeat of a key it has generated for), so that which requests are slow does
//! not depend on when the hedges come. The real-time margins: the 10 s deadline against the
//! 5 s tail and a run of a few seconds; B's 60 s hold against the same run; the hedge's
//! 800 ms against a first token outside the tail (tens of milliseconds) and against the next
//! request's 429 from B (so that every hedge finds B's gate holding). The times to the first
//! token are real time: bounded, not exact.

use resil_lab::routing::{run, Row, Way, HEDGE_AFTER, REQUESTS, TAIL, WAYS};

#[tokio::test]
async fn a_route_serves_every_request_and_a_hedge_cuts_the_tail_of_first_tokens() {
    let rows = run().await.unwrap();
    let ways: Vec<Way> = rows.iter().map(|row| row.way).collect();
    assert_eq!(ways, WAYS);
    let [direct, hedged, routed, both] = &rows[..] else {
        panic!("four rows, got {rows:?}")
    };

    // A: 3 calls open its breaker (request 0 and its 2 retries without a route; requests 0,
    // 3 and 6, each moving on to B, with one). B: its quota of 20, then one 429, whose hold
    // closes B's gate for the rest of the run. Neither is called again, hedges included: a
    // 503 or a 429 comes long before a hedge would. C: without a route, the 66 requests whose
    // first choice it is; with one, every request but B's first 20. A hedge goes to C with a
    // route too (A's breaker is open, B's gate holds), one for each request in C's tail: 1 in
    // 10 of C's requests.
    assert_eq!(direct.sent, [3, 21, 66]);
    assert_eq!(hedged.sent, [3, 21, 66 + 6]);
    assert_eq!(routed.sent, [3, 21, 180]);
    assert_eq!(both.sent, [3, 21, 180 + 18]);
    let hedges: Vec<u32> = rows.iter().map(|row| row.hedges).collect();
    assert_eq!(hedges, [0, 6, 0, 18]);

    // Without a route every request whose first choice is A or B fails but B's first 20,
    // with a hedge or without.
    let failed = |row: &Row, kind: &str| row.failed.get(kind).copied();
    for row in [direct, hedged] {
        assert_eq!((row.ok, row.failures()), (86, 114), "{row:?}");
        assert_eq!(failed(row, "503"), Some(1));
        assert_eq!(failed(row, "breaker_open"), Some(66));
        assert_eq!(failed(row, "429"), Some(1));
        assert_eq!(failed(row, "rate_limited"), Some(46));
    }
    // With one, every request gets its answer.
    for row in [routed, both] {
        assert_eq!((row.ok, row.failures()), (REQUESTS as u32, 0), "{row:?}");
    }

    // Time to the first token. Without a hedge, the route cuts none of C's tail, and sends C
    // more of it (18 slow answers of 200 against 6 of 86): both p99s are the tail. With one,
    // each slow answer is raced by a hedge after 800 ms; the 10th of C's hedges is slow too,
    // so one request of the route's still waits the tail, under the p99 of 200 (the 2
    // slowest are above it); none of the 6 without a route does.
    let slow: Vec<u32> = rows.iter().map(|row| row.slow).collect();
    assert_eq!(slow, [6, 0, 18, 1]);
    for row in [direct, routed] {
        assert!(row.p99 >= TAIL.1, "{row:?}");
    }
    for row in [hedged, both] {
        assert!(row.p99 >= HEDGE_AFTER && row.p99 < TAIL.1 / 2, "{row:?}");
    }
    for row in &rows {
        assert!(row.p50 < TAIL.1 / 5, "{row:?}");
    }
}
