//! The `learn_limits` example's rows, all at once against their own mock providers: the
//! rate rows against providers stating 10 completions per 1 s window, the bulkhead rows
//! against providers generating 8 at once, then 4, then 8 again (over loopback and real
//! time, about 10 s: the `bulkhead = 4` row's 100 calls of 400 ms, 4 at a time). The 429s
//! are counts the rows can be held to (a stray one at a window's edge allowed); the times
//! are real time, asserted as orderings with wide margins: 40 calls at 10 per window take 4
//! windows, at 5/s 8 s.

use std::time::Duration;

use resil_lab::learn_limits::{
    run_together, BulkheadRow, Row, BULKHEAD_NAMES, CALLERS, CALLS, NAMES,
};

#[tokio::test]
async fn a_gate_that_learns_the_limit_collects_no_429s_and_beats_a_gate_set_too_low() {
    let (rows, bulkheads) = run_together().await.unwrap();
    for row in &rows {
        eprintln!(
            "{} {:<36} {:>3} × 429 {:>4} calls {:>6.2} s {:>3}/{} {:>4.0} %",
            row.row,
            row.name,
            row.rate_limited,
            row.calls,
            row.total.as_secs_f64(),
            row.succeeded,
            row.callers,
            row.share() * 100.0
        );
    }
    for row in &bulkheads {
        eprintln!(
            "{} {:<36} {:>3} × 429 {:>4} calls {:>6.2} s {:>3}/{} limit {:.1?} / {:.1?}",
            row.row,
            row.name,
            row.rate_limited,
            row.calls,
            row.total.as_secs_f64(),
            row.succeeded,
            row.callers,
            row.limit_shrunk,
            row.limit_whole,
        );
    }
    assert_bulkheads(&bulkheads);
    let names: Vec<&str> = rows.iter().map(|row| row.name).collect();
    assert_eq!(names, NAMES);
    let [ungated, too_high, too_low, exact, auto, halved] = &rows[..] else {
        panic!("six rows, got {rows:?}")
    };
    for row in &rows {
        assert_eq!(row.succeeded, CALLERS, "{row:?}");
    }

    // Without a gate, 30 of the 40 collect a 429 in the first window alone, and the rest
    // retry together at each window's start. A gate twice too fast collects one in each
    // window it overruns (3); auto and the limit declared exactly, none but a stray.
    assert!(ungated.rate_limited >= 20, "{ungated:?}");
    assert!(too_high.rate_limited >= 1, "{too_high:?}");
    for row in [exact, auto] {
        assert!(row.rate_limited <= 2, "{row:?}");
    }
    assert!(
        auto.rate_limited < too_high.rate_limited,
        "{auto:?} {too_high:?}"
    );
    assert!(auto.rate_limited * 10 < ungated.rate_limited, "{auto:?}");
    // Halved at once mid-window, the provider turns away what the gate had already promised
    // past the new limit: one call, or a stray more.
    assert!(halved.rate_limited <= 3, "{halved:?}");
    assert!(auto.calls <= CALLERS as u32 + 2, "{auto:?}");

    // Half the limit leaves half of every window idle: the slowest of the fixed rows, 8 s
    // against 4 windows, and slower than auto.
    let slowest = |row: &Row| too_low.total > row.total + Duration::from_millis(500);
    for row in [ungated, too_high, exact, auto] {
        assert!(slowest(row), "{too_low:?} against {row:?}");
    }
    assert!(too_low.total >= Duration::from_secs(7), "{too_low:?}");
    assert!(too_low.share() <= 0.6, "{too_low:?}");
    assert!(auto.share() > too_low.share(), "{auto:?}");
    assert!(exact.total < Duration::from_secs(6), "{exact:?}");
}

/// The bulkhead rows: 100 calls by 32 workers, the provider's capacity 8 → 4 → 8.
fn assert_bulkheads(rows: &[BulkheadRow]) {
    let names: Vec<&str> = rows.iter().map(|row| row.name).collect();
    assert_eq!(names, BULKHEAD_NAMES);
    let [unbounded, full, half, adaptive] = rows else {
        panic!("four rows, got {rows:?}")
    };
    for row in rows {
        assert_eq!(row.succeeded, CALLS, "{row:?}");
    }

    // Without a bulkhead, 24 of the 32 first calls collect a 429, and their retries more
    // (about 100 in all). Half the capacity never overruns it; the full capacity overruns
    // the halved one at least once per place it lost.
    assert!(unbounded.rate_limited >= 40, "{unbounded:?}");
    assert!(half.rate_limited <= 2, "{half:?}");
    assert!(full.rate_limited >= 2, "{full:?}");
    // The adaptive bulkhead starts at 16 (8 too many), then probes a place past the
    // capacity now and then: some 429s, several times fewer than without a bulkhead.
    assert!(
        adaptive.rate_limited * 3 < unbounded.rate_limited,
        "{adaptive:?}"
    );
    assert!(adaptive.calls <= CALLS as u32 + 40, "{adaptive:?}");

    // It learns the halved capacity, and that it recovered: its limit on average lower
    // while the capacity was 4 than while it was 8.
    let (Some(shrunk), Some(whole)) = (adaptive.limit_shrunk, adaptive.limit_whole) else {
        panic!("an adaptive bulkhead's limits: {adaptive:?}")
    };
    assert!(shrunk < whole, "{adaptive:?}");
    assert!(shrunk <= 6.0 && whole >= 4.0, "{adaptive:?}");

    // 4 at a time, 100 calls of 400 ms take 10 s; the adaptive bulkhead takes more than 4
    // places while the capacity is 8, and finishes sooner.
    assert!(half.total >= Duration::from_secs(9), "{half:?}");
    assert!(adaptive.total < half.total, "{adaptive:?} against {half:?}");
    assert!(full.total < half.total, "{full:?} against {half:?}");
}
