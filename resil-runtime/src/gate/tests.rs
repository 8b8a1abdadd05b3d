//! The gate's unit tests: bursts, deadlines, weights, refunds, throttles, hostile values.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_burst_then_the_steady_rate() {
    let gate = RateGate::new(5, Duration::from_secs(1), 5).unwrap();
    let waits: Vec<_> = (0..20)
        .map(|_| gate.reserve(1, None).unwrap().as_millis())
        .collect();
    assert_eq!(&waits[..6], [0, 0, 0, 0, 0, 200]);
    assert_eq!(waits[19], 3000);
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_the_deadline_reserves_nothing() {
    let gate = RateGate::new(1, Duration::from_secs(1), 1).unwrap();
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    let soon = Instant::now() + Duration::from_millis(500);
    assert_eq!(
        gate.reserve(1, Some(soon)),
        Err(Rejected::RateLimited {
            retry_in: Duration::from_secs(1)
        })
    );
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn weights_and_refunds() {
    let gate = RateGate::new(1000, Duration::from_secs(1), 1000).unwrap();
    assert_eq!(gate.reserve(800, None), Ok(Duration::ZERO));
    let (wait, slot) = gate.reserve_slot(400, None).unwrap();
    assert_eq!(wait, Duration::from_millis(200));
    assert!(gate.refund(slot));
    assert!(!gate.refund(slot), "given back once");
    assert_eq!(gate.reserve(200, None), Ok(Duration::ZERO));
    assert_eq!(
        gate.reserve(1001, None),
        Err(Rejected::OverBurst {
            cost: 1001,
            burst: 1000
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttle_holds_every_slot_for_its_wait() {
    let gate = RateGate::new(10, Duration::from_secs(1), 10).unwrap();
    for _ in 0..15 {
        gate.reserve(1, None).unwrap();
    }
    let before = gate.epoch();
    gate.hold(Duration::from_secs(2));
    assert_eq!(gate.epoch(), before + 1, "the 15 reservations are revoked");
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(2)));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(2100)));
    gate.hold(Duration::from_secs(1));
    assert_eq!(gate.epoch(), before + 1, "an earlier end changes nothing");
}

/// Found by the model: a hold shorter than the interval used to open a fresh slot right
/// after a call that had just started (1/s: calls at 0 and 1 ms).
#[tokio::test(start_paused = true)]
async fn a_short_hold_keeps_counting_the_calls_that_started() {
    let gate = RateGate::new(1, Duration::from_secs(1), 1).unwrap();
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    gate.hold(Duration::from_millis(1));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn hostile_values_saturate() {
    let gate = RateGate::new(u64::MAX, Duration::MAX, u64::MAX).unwrap();
    assert!(gate.reserve(u64::MAX, None).is_ok());
    gate.hold(Duration::MAX);
    let slow = RateGate::new(1, Duration::MAX, 1).unwrap();
    assert_eq!(slow.reserve(1, None), Ok(Duration::ZERO));
    assert!(slow.reserve(1, Some(Instant::now())).is_err());
}

/// A slowdown fades over ten periods, but within a minute: a 429 on a gate of 60 an hour does
/// not slow it for ten hours, and one a minute later may slow it again.
#[tokio::test(start_paused = true)]
async fn a_slowdown_fades_within_a_minute_whatever_the_period() {
    let gate = RateGate::new(60, Duration::from_secs(3600), 1).unwrap();
    gate.slow_down();
    tokio::time::advance(Duration::from_secs(59)).await;
    // 59 s on, a sixtieth of the 15 s slowdown is left.
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_millis(60_250)));
    tokio::time::advance(Duration::from_secs(121)).await;
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(60)), "faded");
    tokio::time::advance(Duration::from_secs(120)).await;
    gate.slow_down();
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    assert_eq!(
        gate.reserve(1, None),
        Ok(Duration::from_secs(75)),
        "slowed again"
    );
}

/// However long the period, a slowed unit adds at most the fade's minute to the schedule:
/// a gate of one a day, slowed, waits a day and a minute for its next unit, not a day and six
/// hours.
#[tokio::test(start_paused = true)]
async fn a_slowed_unit_adds_at_most_a_minute() {
    let gate = RateGate::new(1, Duration::from_secs(86_400), 1).unwrap();
    gate.slow_down();
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(86_460)));
}

#[tokio::test(start_paused = true)]
async fn an_exact_gate_is_held_by_a_throttle_but_not_slowed() {
    let gate = RateGate::new(10, Duration::from_secs(1), 1)
        .unwrap()
        .exact();
    gate.slow_down();
    gate.hold(Duration::from_secs(2));
    assert_eq!(gate.reserve(1, None), Ok(Duration::from_secs(2)));
    assert_eq!(
        gate.reserve(1, None),
        Ok(Duration::from_millis(2100)),
        "its declared 10/s after the hold"
    );
}
