//! The limit's state machine on tokio's paused clock: each failure mode the module's
//! documentation names, one test each.

use std::time::Duration;

use tokio::time::{advance, Instant};

use super::*;

const MS: Duration = Duration::from_millis(1);

/// What `signal` after `took` says, for an attempt with `in_flight` in the bulkhead.
async fn after(
    adaptive: &Adaptive,
    signal: Signal,
    took: Duration,
    in_flight: usize,
) -> Option<LimitChange> {
    // A tick after the last attempt: the next starts after any cut it made.
    advance(MS).await;
    let started = Instant::now();
    advance(took).await;
    let sample = Sample {
        signal,
        started,
        cost: 1,
        in_flight,
    };
    adaptive.observe(sample, Instant::now(), |_, _| {})
}

/// Successes of `took` each, the bulkhead full, until the limit stops moving up or `calls`.
async fn successes(adaptive: &Adaptive, took: Duration, calls: usize) {
    for _ in 0..calls {
        let in_flight = adaptive.limit();
        after(adaptive, Signal::Success, took, in_flight).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_failures_in_flight_halves_the_limit_once() {
    let (adaptive, start) = Adaptive::new(2, 64);
    assert_eq!(start, 16);
    // Sixteen attempts start together and all time out: they ran under the same limit.
    let started = Instant::now();
    advance(100 * MS).await;
    let changes: Vec<_> = (0..16)
        .filter_map(|_| {
            let sample = Sample {
                signal: Signal::Overload,
                started,
                cost: 1,
                in_flight: 16,
            };
            adaptive.observe(sample, Instant::now(), |_, _| {})
        })
        .collect();
    assert_eq!(
        changes,
        [LimitChange {
            to: 8,
            noted: Some(16)
        }]
    );
    // One that started after the cut halves it again, down to the minimum and no lower.
    assert_eq!(
        after(&adaptive, Signal::Overload, MS, 8).await.unwrap().to,
        4
    );
    assert_eq!(
        after(&adaptive, Signal::Overload, MS, 4).await.unwrap().to,
        2
    );
    assert_eq!(after(&adaptive, Signal::Overload, MS, 2).await, None);
    assert_eq!(adaptive.limit(), 2);
}

#[tokio::test(start_paused = true)]
async fn successes_add_one_per_window_up_to_the_maximum() {
    let (adaptive, _) = Adaptive::new(1, 20);
    // 16 successes with the bulkhead full: one more.
    for _ in 0..15 {
        assert_eq!(after(&adaptive, Signal::Success, 10 * MS, 16).await, None);
    }
    let grown = after(&adaptive, Signal::Success, 10 * MS, 16).await;
    // 16 -> 17 is not a tenth: the gauge moves, no event yet.
    assert_eq!(
        grown,
        Some(LimitChange {
            to: 17,
            noted: None
        })
    );
    successes(&adaptive, 10 * MS, 10_000).await;
    assert_eq!(adaptive.limit(), 20, "bounded by the maximum");
}

#[tokio::test(start_paused = true)]
async fn an_idle_limit_does_not_grow() {
    let (adaptive, _) = Adaptive::new(1, 256);
    // Two calls at a time never test a limit of 16: it proves nothing about 17.
    for _ in 0..1_000 {
        assert_eq!(after(&adaptive, Signal::Success, 10 * MS, 2).await, None);
    }
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn answers_twice_as_slow_take_a_tenth_off_once_per_round_trip() {
    let (adaptive, _) = Adaptive::new(1, 64);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    assert_eq!(adaptive.baseline(), Some(100 * MS));
    // Queueing: 250 ms against 100. A tenth off, not half.
    let change = after(&adaptive, Signal::Success, 250 * MS, 16).await;
    assert_eq!(change.map(|change| change.to), Some(14));
    // Another that started before the cut ran under the old limit: nothing more.
    let started = Instant::now() - 200 * MS;
    let sample = Sample {
        signal: Signal::Success,
        started,
        cost: 1,
        in_flight: 14,
    };
    assert_eq!(adaptive.observe(sample, Instant::now(), |_, _| {}), None);
}

#[tokio::test(start_paused = true)]
async fn latency_is_per_unit_of_cost() {
    let (adaptive, _) = Adaptive::new(1, 64);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    // A call of 10 units taking 10 times as long is as fast per unit: no sign of queueing.
    let started = Instant::now();
    advance(1000 * MS).await;
    let sample = Sample {
        signal: Signal::Success,
        started,
        cost: 10,
        in_flight: 16,
    };
    assert_eq!(adaptive.observe(sample, Instant::now(), |_, _| {}), None);
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn modest_overload_stops_the_growth() {
    let (adaptive, _) = Adaptive::new(1, 256);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    // 1.6 times the baseline: no throttle, no queueing sign, yet no growth either (Gradient2
    // would keep adding until the provider refused).
    successes(&adaptive, 160 * MS, 5_000).await;
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn the_baseline_does_not_drift_up_with_our_own_queue() {
    let (adaptive, _) = Adaptive::new(1, 256);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    // Minutes of answers at 1.9 times the baseline with the bulkhead full: the queue is ours,
    // so those answers never become the norm (Vegas's baseline would creep up with them).
    successes(&adaptive, 190 * MS, 2_000).await;
    assert!(190 * MS * 2_000 > WINDOW * 30, "thirty windows and more");
    assert_eq!(adaptive.baseline(), Some(100 * MS));
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn the_baseline_is_measured_again_each_window() {
    let (adaptive, _) = Adaptive::new(1, 256);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    // The provider is slower for good, and we are far from full: after a window, 300 ms is
    // the norm rather than a queue to shrink from forever.
    let mut limits = Vec::new();
    for _ in 0..200 {
        after(&adaptive, Signal::Success, 300 * MS, 2).await;
        limits.push(adaptive.limit());
    }
    assert_eq!(adaptive.baseline(), Some(300 * MS));
    assert!(
        limits.iter().all(|&limit| limit == 16),
        "no calls rejected meanwhile"
    );
    // Now under load at that pace: no sign of queueing, so it grows again.
    successes(&adaptive, 300 * MS, 100).await;
    assert!(adaptive.limit() > 16);
    // A faster answer lowers the baseline at once.
    after(&adaptive, Signal::Success, 80 * MS, 2).await;
    assert_eq!(adaptive.baseline(), Some(80 * MS));
}

#[tokio::test(start_paused = true)]
async fn steps_up_are_reported_once_they_add_up_to_a_tenth() {
    let (adaptive, _) = Adaptive::new(1, 256);
    let mut noted = Vec::new();
    for _ in 0..2_000 {
        let in_flight = adaptive.limit();
        if let Some(change) = after(&adaptive, Signal::Success, MS, in_flight).await {
            noted.extend(change.noted.map(|from| (from, change.to)));
        }
    }
    assert_eq!(noted[..2], [(16, 18), (18, 20)]);
}

#[tokio::test(start_paused = true)]
async fn a_provider_slower_for_good_under_saturation_is_relearned_at_the_minimum() {
    let (adaptive, _) = Adaptive::new(2, 64);
    after(&adaptive, Signal::Success, 100 * MS, 4).await;
    // Three times slower, the bulkhead always full: no answer qualifies until the limit is at
    // its minimum, where the answers measure the provider's own pace (Envoy's measurement).
    successes(&adaptive, 300 * MS, 200).await;
    assert_eq!(adaptive.baseline(), Some(300 * MS));
    successes(&adaptive, 300 * MS, 200).await;
    assert!(adaptive.limit() > 2, "grows again at the new pace");
}

#[tokio::test(start_paused = true)]
async fn failures_of_the_places_held_over_the_limit_do_not_cut_it_again() {
    let (adaptive, _) = Adaptive::new(1, 64);
    // Cut from 16 to 8; the 16 operations keep their places, and their retries, started
    // after the cut, fail too: the excess's failures, not the new limit's.
    assert_eq!(
        after(&adaptive, Signal::Overload, MS, 16)
            .await
            .map(|c| c.to),
        Some(8)
    );
    for _ in 0..8 {
        assert_eq!(after(&adaptive, Signal::Overload, MS, 12).await, None);
    }
    assert_eq!(adaptive.limit(), 8);
    // Back within the limit, a failure cuts again, rounding up: 8 → 4 → 2, and 5 → 3.
    assert_eq!(
        after(&adaptive, Signal::Overload, MS, 8)
            .await
            .map(|c| c.to),
        Some(4)
    );
    let (adaptive, _) = Adaptive::new(1, 5);
    assert_eq!(
        after(&adaptive, Signal::Overload, MS, 5)
            .await
            .map(|c| c.to),
        Some(3)
    );
}
