//! The classic outages, replayed on the paused clock: the figures the examples print,
//! asserted exactly where the run is deterministic and within stated bounds where jitter
//! draws from the thread's random generator.

use std::time::Duration;

use resil_lab::fallback_trap::Breakers;
use resil_lab::thundering_herd::Variant;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn retry_storm() {
    let rows = resil_lab::retry_storm::run().await;
    let row = |name: &str| rows.iter().find(|row| row.row == name).unwrap().clone();

    let a = row("a");
    assert_eq!(
        (a.total, a.p50, a.calls, a.count("timeout")),
        (10_000 * MS, 1000 * MS, 100, 100)
    );

    let b = row("b");
    assert_eq!((b.calls, b.count("timeout")), (300, 100));
    // Three 1 s timeouts plus two full-jitter waits (≤ 300 ms and ≤ 600 ms) per request.
    assert!(b.p50 >= 3000 * MS && b.p50 <= 3900 * MS, "{:?}", b.p50);
    assert!(
        b.total >= 30_000 * MS && b.total <= 39_000 * MS,
        "{:?}",
        b.total
    );

    let c = row("c");
    assert_eq!(
        (c.calls, c.count("timeout"), c.count("breaker_open"), c.p50),
        (10, 10, 90, Duration::ZERO),
        "the 10 that called end with their timeout; the 90 others never called"
    );
    assert!(
        c.total >= 1000 * MS && c.total <= 1600 * MS,
        "one timeout and one backoff wait: {:?}",
        c.total
    );

    let recovered = row("c_recovered");
    assert_eq!((recovered.count("ok"), recovered.calls), (100, 100));
    assert_eq!(
        recovered.total,
        220 * MS,
        "the probe's 20 ms, then 10 rounds of 20 ms"
    );

    let d = row("d");
    assert_eq!(
        (d.count("ok"), d.count("bulkhead_full"), d.calls),
        (4, 96, 4)
    );
    assert_eq!(d.total, 20 * MS);
}

#[tokio::test(start_paused = true)]
async fn fallback_trap() {
    let rows = resil_lab::fallback_trap::run().await;
    let figures: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.breakers,
                r.load,
                r.primary_calls,
                r.backup_calls,
                r.waits,
                r.answered,
                r.failed,
            )
        })
        .collect();
    assert_eq!(
        figures,
        [
            (Breakers::Shared, "sequential", 30, 10, 20, 10, 0),
            (Breakers::Shared, "parallel", 8, 0, 0, 0, 16),
            (Breakers::PerModel, "sequential", 5, 10, 3, 10, 0),
            (Breakers::PerModel, "parallel", 0, 16, 0, 16, 0),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn thundering_herd() {
    let rows = resil_lab::thundering_herd::run().await;
    let row = |clients, variant, seed| {
        rows.iter()
            .find(|r| r.clients == clients && r.variant == variant && r.seed == seed)
            .unwrap()
            .clone()
    };
    assert!(
        rows.iter().all(|r| r.answered == r.clients),
        "everyone is served in the end"
    );
    let lockstep = row(20, Variant::NoJitter, 1);
    assert_eq!((lockstep.requests, lockstep.rejected), (77, 57));
    let spread = row(20, Variant::FullJitter, 1);
    assert_eq!((spread.requests, spread.rejected), (48, 28));
    for seed in 1..=3 {
        let gated = row(20, Variant::Gated, seed);
        assert_eq!(
            (gated.requests, gated.rejected, gated.total),
            (20, 0, 875 * MS)
        );
        let herd = row(100, Variant::NoJitter, seed);
        let jittered = row(100, Variant::FullJitter, seed);
        assert!(
            herd.total > 15 * jittered.total,
            "no jitter is over 15× slower"
        );
        assert!(jittered.requests * 4 < herd.requests);
        let gated = row(100, Variant::Gated, seed);
        assert_eq!((gated.requests, gated.rejected), (100, 0));
    }
}

#[tokio::test(start_paused = true)]
async fn triage() {
    let (naive, classified) = resil_lab::triage::run().await;
    assert_eq!(
        (naive.requests, naive.elapsed, naive.status),
        (6, 6290 * MS, 401)
    );
    assert_eq!(
        (classified.requests, classified.elapsed, classified.status),
        (1, 15 * MS, 401)
    );
}

#[test]
fn worst_case() {
    let worst: Vec<u128> = resil_lab::worst_case::cases()
        .iter()
        .map(|c| c.worst.as_millis())
        .collect();
    assert_eq!(worst, [60_900, 121_800, 16_300, 180_900]);
}
