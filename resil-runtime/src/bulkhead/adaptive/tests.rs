//! The limit's state machine on tokio's paused clock: each failure mode the module's
//! documentation names, one test each.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{advance, Instant};

use super::*;

const MS: Duration = Duration::from_millis(1);

/// What `signal` after `took` says, for an attempt of one unit with `in_flight` in the
/// bulkhead.
async fn after(
    adaptive: &Adaptive,
    signal: Signal,
    took: Duration,
    in_flight: usize,
) -> Option<LimitChange> {
    costing(adaptive, signal, took, 1, in_flight).await
}

/// [`after`] for an attempt of `cost` units.
async fn costing(
    adaptive: &Adaptive,
    signal: Signal,
    took: Duration,
    cost: u64,
    in_flight: usize,
) -> Option<LimitChange> {
    // A tick after the last attempt: the next starts after any cut it made.
    advance(MS).await;
    let started = Instant::now();
    advance(took).await;
    let sample = Sample {
        signal,
        started,
        cost,
        in_flight,
    };
    adaptive.observe(sample, Instant::now(), |_, _| {})
}

/// A round of answers of `took` each with the bulkhead barely used: the baseline's measure.
async fn light(adaptive: &Adaptive, took: Duration) {
    for _ in 0..ROUND {
        assert_eq!(after(adaptive, Signal::Success, took, 2).await, None);
    }
}

/// Successes of `took` each, the bulkhead full, until the limit stops moving up or `calls`.
async fn successes(adaptive: &Adaptive, took: Duration, calls: usize) {
    for _ in 0..calls {
        let in_flight = adaptive.limit();
        after(adaptive, Signal::Success, took, in_flight).await;
    }
}

/// `seconds` with the bulkhead always full (callers wait for every place it has), each call's
/// cost and latency drawn by `draw` from a seeded generator, given the calls in flight with
/// it; returns the calls answered.
async fn saturated(
    adaptive: &Adaptive,
    seconds: u64,
    mut draw: impl FnMut(&mut StdRng, usize) -> (u64, Duration),
) -> usize {
    let mut rng = StdRng::seed_from_u64(44);
    let end = Instant::now() + Duration::from_secs(seconds);
    // (started, ends, cost) of each call in flight.
    let mut calls: Vec<(Instant, Instant, u64)> = Vec::new();
    let mut answered = 0;
    loop {
        while calls.len() < adaptive.limit() {
            let (cost, took) = draw(&mut rng, calls.len() + 1);
            let now = Instant::now();
            calls.push((now, now + took, cost));
        }
        let next = (0..calls.len()).min_by_key(|&i| calls[i].1).unwrap();
        let (started, ends, cost) = calls[next];
        if ends > end {
            return answered;
        }
        advance(ends - Instant::now()).await;
        let sample = Sample {
            signal: Signal::Success,
            started,
            cost,
            in_flight: calls.len(),
        };
        calls.swap_remove(next);
        adaptive.observe(sample, Instant::now(), |_, _| {});
        answered += 1;
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
async fn rounds_twice_as_slow_take_a_tenth_off_once_per_round_trip() {
    let (adaptive, _) = Adaptive::new(1, 64);
    light(&adaptive, 100 * MS).await;
    assert_eq!(adaptive.baseline(1), Some(100 * MS));
    // Queueing: a round at 250 ms against 100. A tenth off at its end, not half.
    for _ in 1..ROUND {
        assert_eq!(after(&adaptive, Signal::Success, 250 * MS, 16).await, None);
    }
    let change = after(&adaptive, Signal::Success, 250 * MS, 16).await;
    assert_eq!(change.map(|change| change.to), Some(14));
    // A round of answers to calls made before the cut ran under the old limit: nothing more.
    let started = Instant::now() - 200 * MS;
    for _ in 0..ROUND {
        let sample = Sample {
            signal: Signal::Success,
            started,
            cost: 1,
            in_flight: 14,
        };
        assert_eq!(adaptive.observe(sample, Instant::now(), |_, _| {}), None);
    }
    // The next round made under the new limit still queues: another tenth.
    for _ in 1..ROUND {
        assert_eq!(after(&adaptive, Signal::Success, 250 * MS, 14).await, None);
    }
    let change = after(&adaptive, Signal::Success, 250 * MS, 14).await;
    assert_eq!(change.map(|change| change.to), Some(12));
}

#[tokio::test(start_paused = true)]
async fn one_slow_answer_in_a_round_is_no_queue() {
    let (adaptive, _) = Adaptive::new(1, 64);
    light(&adaptive, 100 * MS).await;
    // Seven answers of a round at four times the usual: its median is still the usual.
    for n in 0..10 * ROUND {
        let took = if n % ROUND < 7 { 400 * MS } else { 100 * MS };
        after(&adaptive, Signal::Success, took, adaptive.limit()).await;
    }
    assert!(adaptive.limit() > 16, "{}", adaptive.limit());
}

/// LLM answers take 100 to 400 ms whatever the load: that spread is no queue. The limit grows
/// as with answers of 250 ms every time, and as many calls are answered (it fell to 1: each
/// answer was compared alone with the least latency ever seen).
#[tokio::test(start_paused = true)]
async fn answers_spread_around_their_usual_latency_are_no_queue() {
    let (constant, _) = Adaptive::new(1, 256);
    let steady = saturated(&constant, 60, |_, _| (1, 250 * MS)).await;
    let (spread, _) = Adaptive::new(1, 256);
    let answered = saturated(&spread, 60, |rng, _| (1, rng.random_range(100..=400) * MS)).await;
    assert!(constant.limit() >= 200, "{}", constant.limit());
    assert!(spread.limit() >= 200, "{}", spread.limit());
    assert!(answered * 10 >= steady * 9, "{answered} against {steady}");
}

/// Calls of 4 000 and of 40 units, the provider taking 100 ms plus 50 µs a unit whatever the
/// load: per unit of cost, a small call takes 34 times a large one's, all of it fixed part,
/// none of it queue. The limit grows as with calls of one cost (it was held down).
#[tokio::test(start_paused = true)]
async fn a_small_calls_fixed_part_is_no_queue() {
    let (adaptive, _) = Adaptive::new(1, 256);
    saturated(&adaptive, 60, |rng, _| {
        let cost = if rng.random_bool(0.5) { 4_000 } else { 40 };
        (cost, 100 * MS + Duration::from_micros(50 * cost))
    })
    .await;
    assert!(adaptive.limit() >= 200, "{}", adaptive.limit());
    let expected = |cost| adaptive.baseline(cost).unwrap();
    assert_eq!((expected(40), expected(4_000)), (102 * MS, 300 * MS));
}

/// A provider that really queues, taking 50 ms a quarter of the calls it holds, however its
/// answers are spread: the limit comes down from 16 to where its answers take less than
/// twice their time at light load.
#[tokio::test(start_paused = true)]
async fn a_provider_that_queues_brings_the_limit_down() {
    let (adaptive, _) = Adaptive::new(1, 256);
    light(&adaptive, 50 * MS).await;
    saturated(&adaptive, 60, |rng, held| {
        let spread: f64 = rng.random_range(0.8..1.2);
        (1, (50 * MS * held.max(4) as u32 / 4).mul_f64(spread))
    })
    .await;
    assert!((5..=10).contains(&adaptive.limit()), "{}", adaptive.limit());
}

#[tokio::test(start_paused = true)]
async fn latency_is_per_unit_of_cost() {
    let (adaptive, _) = Adaptive::new(1, 64);
    light(&adaptive, 100 * MS).await;
    // Calls of 10 units taking 10 times as long: as fast per unit, no sign of queueing.
    for _ in 0..ROUND {
        costing(&adaptive, Signal::Success, 1000 * MS, 10, 16).await;
    }
    assert!(adaptive.limit() >= 16);
    // Calls of a tenth of a unit are no faster than calls of one: not slow either.
    let (adaptive, _) = Adaptive::new(1, 64);
    for _ in 0..ROUND {
        costing(&adaptive, Signal::Success, 100 * MS, 10, 2).await;
    }
    assert_eq!(adaptive.baseline(1), Some(100 * MS));
    for _ in 0..ROUND {
        costing(&adaptive, Signal::Success, 100 * MS, 1, 16).await;
    }
    assert!(adaptive.limit() >= 16);
}

#[tokio::test(start_paused = true)]
async fn modest_overload_stops_the_growth() {
    let (adaptive, _) = Adaptive::new(1, 256);
    light(&adaptive, 100 * MS).await;
    // 1.6 times the baseline: no throttle, no queueing sign, yet no growth either (Gradient2
    // would keep adding until the provider refused).
    successes(&adaptive, 160 * MS, 5_000).await;
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn the_baseline_does_not_drift_up_with_our_own_queue() {
    let (adaptive, _) = Adaptive::new(1, 256);
    light(&adaptive, 100 * MS).await;
    // Minutes of answers at 1.9 times the baseline with the bulkhead full: the queue is ours,
    // so those answers never become the norm (Vegas's baseline would creep up with them).
    successes(&adaptive, 190 * MS, 2_000).await;
    assert!(190 * MS * 2_000 > WINDOW * 30, "thirty windows and more");
    assert_eq!(adaptive.baseline(1), Some(100 * MS));
    assert_eq!(adaptive.limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn the_baseline_is_measured_again_each_window() {
    let (adaptive, _) = Adaptive::new(1, 256);
    light(&adaptive, 100 * MS).await;
    // The provider is slower for good, and we are far from full: after a window, 300 ms is
    // the norm rather than a queue to shrink from forever.
    let mut limits = Vec::new();
    for _ in 0..200 {
        after(&adaptive, Signal::Success, 300 * MS, 2).await;
        limits.push(adaptive.limit());
    }
    assert_eq!(adaptive.baseline(1), Some(300 * MS));
    assert!(
        limits.iter().all(|&limit| limit == 16),
        "no calls rejected meanwhile"
    );
    // Now under load at that pace: no sign of queueing, so it grows again.
    successes(&adaptive, 300 * MS, 100).await;
    assert!(adaptive.limit() > 16);
    // Faster again: the next window measures it.
    let limit = adaptive.limit();
    for _ in 0..200 {
        after(&adaptive, Signal::Success, 80 * MS, 2).await;
    }
    assert_eq!(adaptive.baseline(1), Some(80 * MS));
    assert_eq!(adaptive.limit(), limit);
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
    light(&adaptive, 100 * MS).await;
    // Three times slower, the bulkhead always full: no answer qualifies until the limit is at
    // its minimum, where the answers measure the provider's own pace (Envoy's measurement).
    successes(&adaptive, 300 * MS, 250).await;
    assert_eq!(adaptive.baseline(1), Some(300 * MS));
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
