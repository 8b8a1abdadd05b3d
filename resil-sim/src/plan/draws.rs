//! The draws of a world's parts: a declaration, a target, its streams, a breaker's kind.

use rand::rngs::StdRng;
use rand::Rng;
use resil_runtime::{BreakerKind, Jitter, WindowSize};

use super::{
    log_ms, ms, BreakerSpec, BulkheadSpec, RateSpec, Retune, Spec, States, StreamShape, TargetSpec,
    Turns, HORIZON,
};

/// Whether a declaration orders its waiters, where it has a gate or a queue of all calls.
pub(super) fn draw_turns(rng: &mut StdRng, spec: &Spec) -> Turns {
    let rate = spec.rate.as_ref();
    let queue = (spec.bulkhead.as_ref()).is_some_and(|b| b.queue > 0);
    // A learning gate serves in arrival order: `build` refuses to order it.
    let learns = spec.rate.as_ref().is_some_and(|rate| rate.learn);
    if learns || (rate.is_none() && !queue) || rng.random_bool(0.4) {
        return Turns::default();
    }
    // A batch share is the gate of all calls'.
    let declared = rate.is_some_and(|rate| rate.declared.is_some() && !rate.per_key);
    Turns {
        priority: true,
        fair: rng.random_bool(0.5),
        batch_share: (declared && rng.random_bool(0.5)).then(|| rng.random_range(10..=90)),
    }
}

pub(super) fn stream_shape(rng: &mut StdRng) -> StreamShape {
    let p = |rng: &mut StdRng, high: f64| {
        if rng.random_bool(0.4) {
            0.0
        } else {
            rng.random_range(0.0..high)
        }
    };
    StreamShape {
        items: rng.random_range(1..=30),
        headers: rng.random_range(0..=3),
        gap: log_ms(rng, 1, 3_000),
        p_stall: p(rng, 0.2),
        p_cut: p(rng, 0.2),
        p_short: p(rng, 0.2),
        p_linger: p(rng, 0.3),
        p_flood: p(rng, 0.1),
    }
}

pub(super) fn target(rng: &mut StdRng) -> TargetSpec {
    let p = |rng: &mut StdRng, high: f64| {
        if rng.random_bool(0.3) {
            0.0
        } else {
            rng.random_range(0.0..high)
        }
    };
    let outages = (0..rng.random_range(0..=2))
        .map(|_| {
            let from = ms(rng, 0, HORIZON.as_millis() as u64);
            (from, from + log_ms(rng, 100, 30_000))
        })
        .collect();
    TargetSpec {
        latency: log_ms(rng, 5, 2_000),
        tail: rng.random_range(1.1..3.0),
        p_transient: p(rng, 0.4),
        p_permanent: p(rng, 0.05),
        p_moves_on: p(rng, 0.1),
        p_throttle: p(rng, 0.2),
        p_hang: if rng.random_bool(0.3) {
            rng.random_range(0.0..0.05)
        } else {
            0.0
        },
        retry_after: log_ms(rng, 10, 40_000),
        capacity: rng
            .random_bool(0.4)
            .then(|| (rng.random_range(1..=50), log_ms(rng, 500, 60_000))),
        states: match rng.random_range(0..4) {
            0 => States::Silent,
            1 | 2 => States::Honest,
            _ => States::Flapping(rng.random_range(0.001..0.3)),
        },
        outages,
        stream: StreamShape::default(),
    }
}

fn kind(rng: &mut StdRng) -> BreakerKind {
    let window = |rng: &mut StdRng| {
        if rng.random_bool(0.5) {
            WindowSize::Calls(rng.random_range(2..=30))
        } else {
            WindowSize::Time(log_ms(rng, 500, 60_000))
        }
    };
    match rng.random_range(0..4) {
        0 | 1 => BreakerKind::Consecutive,
        2 => BreakerKind::FailureRate {
            percent: rng.random_range(10..=90),
            window: window(rng),
            min_calls: rng.random_range(1..=10),
        },
        _ => BreakerKind::SlowCall {
            percent: rng.random_range(10..=90),
            slower_than: log_ms(rng, 5, 5_000),
            window: window(rng),
            min_calls: rng.random_range(1..=10),
        },
    }
}

pub(super) fn spec(rng: &mut StdRng) -> Spec {
    let timeout = rng.random_bool(0.7).then(|| log_ms(rng, 20, 20_000));
    let deadline = rng.random_bool(0.6).then(|| log_ms(rng, 50, 120_000));
    let retry = rng.random_range(0..=4);
    let breaker = rng.random_bool(0.6).then(|| BreakerSpec {
        threshold: rng.random_range(1..=8),
        cooldown: log_ms(rng, 100, 60_000),
        kind: kind(rng),
        per_key: rng.random_bool(0.6),
    });
    let bulkhead = rng.random_bool(0.4).then(|| {
        let adaptive = rng.random_bool(0.3);
        let min = rng.random_range(1..=6);
        BulkheadSpec {
            limit: if adaptive {
                (min, min + rng.random_range(0..=20))
            } else {
                (min, min)
            },
            adaptive,
            queue: if rng.random_bool(0.5) {
                rng.random_range(1..=20)
            } else {
                0
            },
            per_key: rng.random_bool(0.5),
        }
    });
    let rate = rng.random_bool(0.6).then(|| {
        let auto = rng.random_bool(0.2);
        let declared = (!auto).then(|| {
            let count = rng.random_range(1..=40);
            let burst = if rng.random_bool(0.5) {
                1
            } else {
                rng.random_range(1..=count.max(2))
            };
            (count, log_ms(rng, 200, 60_000), burst)
        });
        RateSpec {
            declared,
            learn: auto || rng.random_bool(0.4),
            exact: !auto && rng.random_bool(0.2),
            per_key: rng.random_bool(0.5),
        }
    });
    Spec {
        timeout,
        deadline,
        retry,
        retry_after_max: rng.random_bool(0.4).then(|| log_ms(rng, 100, 60_000)),
        backoff: rng
            .random_bool(0.7)
            .then(|| (log_ms(rng, 1, 1_000), log_ms(rng, 1_000, 10_000))),
        jitter: Jitter::ALL[rng.random_range(0..Jitter::ALL.len())].1,
        breaker,
        bulkhead,
        rate,
        tokens: None,
        hedge: (retry > 0 && rng.random_bool(0.3))
            .then(|| (rng.random_range(1..=retry.min(3)), log_ms(rng, 5, 2_000))),
        budget: rng
            .random_bool(0.2)
            .then(|| (rng.random_range(0.05..1.0), rng.random_range(0.0..5.0))),
        independent: rng.random_bool(0.3),
        turns: Turns::default(),
        idle: None,
        max_keys: None,
        fallback: false,
    }
}

/// In about a third of the worlds, one to four tunings set while calls run.
pub(super) fn retunes(rng: &mut StdRng, instances: usize) -> Vec<Retune> {
    if !rng.random_bool(0.3) {
        return Vec::new();
    }
    let mut retunes: Vec<Retune> = (0..rng.random_range(1..=4))
        .map(|_| Retune {
            at: ms(rng, 0, HORIZON.as_millis() as u64),
            instance: rng.random_range(0..instances),
            policy: rng.random_range(0..=1),
            enabled: rng.random_bool(0.85),
            timeout: rng.random_bool(0.7).then(|| log_ms(rng, 20, 20_000)),
            deadline: rng.random_bool(0.6).then(|| log_ms(rng, 50, 120_000)),
            idle: rng.random_bool(0.5).then(|| log_ms(rng, 5, 10_000)),
            retry: rng.random_range(0..=4),
            retry_after_max: log_ms(rng, 100, 60_000),
            backoff: (log_ms(rng, 1, 1_000), log_ms(rng, 1_000, 10_000)),
        })
        .collect();
    retunes.sort_by_key(|retune| retune.at);
    retunes
}

/// In about a quarter of the declarations, a token gate: declared (burst from a tenth of the
/// count to all of it, as `token_rate` defaults to), learning, or both.
pub(super) fn tokens(rng: &mut StdRng) -> Option<RateSpec> {
    if !rng.random_bool(0.25) {
        return None;
    }
    let auto = rng.random_bool(0.2);
    let declared = (!auto).then(|| {
        let count = rng.random_range(10..=4_000);
        let burst = rng.random_range((count / 10).max(1)..=count);
        (count, log_ms(rng, 200, 60_000), burst)
    });
    Some(RateSpec {
        declared,
        learn: auto || rng.random_bool(0.4),
        exact: !auto && rng.random_bool(0.2),
        per_key: rng.random_bool(0.5),
    })
}
