//! Rate gates, shared: the combined rate holds, a throttle seen by one instance holds the
//! others, a slot given up goes back everywhere, and the gate model holds through Redis.

use super::*;

#[tokio::test]
async fn a_shared_gate_holds_the_combined_rate() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 10 a minute with a 1 s deadline: the 11th call's slot is 6 s away, so it is refused.
    let gated = |p: resil::PolicyBuilder| {
        p.rate(10, Duration::from_secs(60), 10)
            .deadline(Duration::from_secs(1))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let calls = Calls::default();
    let mut limited = 0;
    for i in 0..30 {
        let instance = if i % 2 == 0 { &a } else { &b };
        match call(&instance.policy, &calls, Ok(())).await {
            Ok(()) => {}
            Err(ApiError::Rejected(Rejected::RateLimited { .. })) => limited += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(
        calls.count(),
        10,
        "10 a minute across both instances, not 10 each"
    );
    assert_eq!(limited, 20);
    assert_eq!(server.keys("resil:rate:"), ["resil:rate:two::instances"]);
}

/// One call through `instance` that the provider throttles, asking to wait `wait`.
async fn throttle(instance: &Instance, wait: Duration) {
    let throttled = instance
        .policy
        .run(|| async { Err::<(), _>(ApiError::Throttled(wait)) })
        .await;
    assert_eq!(throttled, Err(ApiError::Throttled(wait)));
}

#[tokio::test]
async fn a_throttle_seen_by_one_instance_holds_the_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        p.rate(100, Duration::from_secs(1), 100)
            .deadline(Duration::from_millis(500))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    throttle(&a, Duration::from_secs(5)).await;
    // The hold is written in the background: b's gate says "no slot for 5 s" once it lands.
    let calls = Calls::default();
    let started = Instant::now();
    loop {
        match call(&b.policy, &calls, Ok(())).await {
            Err(ApiError::Rejected(Rejected::RateLimited { retry_in })) => {
                assert!(retry_in > Duration::from_secs(3), "{retry_in:?}");
                break;
            }
            other => assert_eq!(other, Ok(())),
        }
        assert!(started.elapsed() < Duration::from_secs(3), "b never held");
    }
}

/// Found by the gate's model: a hold shorter than the interval lowered the shared schedule
/// below the slot just used, so another instance called 1 ms after it (and the gate's key
/// expired with the hold).
#[tokio::test]
async fn a_short_throttle_keeps_counting_the_call_that_started() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        p.rate(1, Duration::from_secs(10), 1)
            .deadline(Duration::from_secs(5))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    throttle(&a, Duration::from_millis(1)).await;
    // The hold is written in the background; it counts itself in `epoch` (or, before the
    // fix, let the key expire at once).
    let gate = "resil:rate:two::instances";
    eventually("the hold lands in Redis", || {
        let epoch = redis::cmd("HGET").arg(gate).arg("epoch").clone();
        let exists = redis::cmd("EXISTS").arg(gate).clone();
        server.query::<Option<u64>>(&epoch).flatten().is_some()
            || server.query::<bool>(&exists) == Some(false)
    })
    .await;
    let calls = Calls::default();
    let refused = call(&b.policy, &calls, Ok(())).await;
    assert!(
        matches!(refused, Err(ApiError::Rejected(Rejected::RateLimited { retry_in })) if retry_in > Duration::from_secs(5)),
        "a's call took the period's slot: {refused:?}"
    );
    assert_eq!(calls.count(), 0);
}

#[tokio::test]
async fn a_slot_given_up_goes_back_to_every_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 2 a second, no burst: slots 500 ms apart across both instances.
    let gated = |p: resil::PolicyBuilder| p.rate(2, Duration::from_secs(1), 1);
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    let tat = || {
        server.query::<Option<String>>(
            redis::cmd("HGET")
                .arg("resil:rate:two::instances")
                .arg("tat"),
        )
    };
    let after_first = tat();
    // A's second call waits for the slot at +500 ms, and its caller gives up before.
    let given_up =
        tokio::time::timeout(Duration::from_millis(100), call(&a.policy, &calls, Ok(()))).await;
    assert!(given_up.is_err(), "still waiting for its slot");
    // The refund is written in the background: the schedule goes back to where it was.
    eventually("the slot is back in Redis", || tat() == after_first).await;
    // B may have that slot back: with a 700 ms deadline it passes (the next one is at +1 s).
    let b_policy = Policy::builder()
        .name("two::instances")
        .rate(2, Duration::from_secs(1), 1)
        .deadline(Duration::from_millis(700))
        .shared_in(&b.store)
        .build()
        .unwrap();
    assert_eq!(call(&b_policy, &calls, Ok(())).await, Ok(()));
    assert_eq!(calls.count(), 2);
}

#[tokio::test]
async fn a_throttle_revokes_the_slots_other_instances_already_reserved() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 2 a second, no burst: slots 500 ms apart across both instances.
    let gated = |p: resil::PolicyBuilder| p.rate(2, Duration::from_secs(1), 1);
    let (a, b) = (
        Arc::new(instance(&server, gated).await),
        Arc::new(instance(&server, gated).await),
    );
    // A takes the first slot and holds its answer until B has promised the next three.
    let answer = Arc::new(tokio::sync::Notify::new());
    let throttled = tokio::spawn({
        let (a, answer) = (Arc::clone(&a), Arc::clone(&answer));
        async move {
            a.policy
                .run(|| async {
                    answer.notified().await;
                    Err::<(), _>(ApiError::Throttled(Duration::from_secs(3)))
                })
                .await
        }
    });
    let tat = || {
        let key = server.keys("resil:rate:").pop()?;
        let tat: u64 = server.query(redis::cmd("HGET").arg(&key).arg("tat"))?;
        let (seconds, micros): (u64, u64) = server.query(&redis::cmd("TIME"))?;
        Some(Duration::from_micros(
            tat.saturating_sub(seconds * 1_000_000 + micros),
        ))
    };
    eventually("A's slot", || tat().is_some()).await;
    let started = Instant::now();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (b, calls) = (Arc::clone(&b), Arc::clone(&calls));
            tokio::spawn(async move {
                b.policy
                    .run(|| async {
                        calls.lock().unwrap().push(started.elapsed());
                        Ok::<(), ApiError>(())
                    })
                    .await
            })
        })
        .collect();
    // Four slots promised: Redis's schedule runs 1.5 s or more ahead.
    eventually("B's three slots", || {
        tat().is_some_and(|ahead| ahead > Duration::from_millis(1400))
    })
    .await;
    answer.notify_one();
    assert_eq!(
        throttled.await.unwrap(),
        Err(ApiError::Throttled(Duration::from_secs(3)))
    );
    let held_at = started.elapsed();
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(
        calls
            .iter()
            .all(|at| *at >= held_at + Duration::from_millis(2900)),
        "B called during A's hold (from {held_at:?}): {calls:?}"
    );
}

/// The gate's model, through the real Redis: two instances run seeded random calls, calls
/// given up while they wait, and throttles. While Redis answers, the two together never start
/// more than `count + burst - 1` calls in a period, and nothing starts while a throttle holds;
/// once it is killed, each keeps its own limit. (Real time: a window is checked 50 ms short
/// of the period, for the wake-ups a loaded machine delays.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_keep_the_gate_model_through_redis_and_without_it() {
    const COUNT: usize = 5;
    const BURST: usize = 2;
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x2545_f491_4f6c_dd1d] {
        let Some(mut server) = RedisServer::start() else {
            return;
        };
        let gated = |p: resil::PolicyBuilder| {
            p.rate(COUNT as u64, Duration::from_secs(1), BURST as u64)
                .deadline(Duration::from_secs(2))
        };
        let instances = [
            instance(&server, gated).await,
            instance(&server, gated).await,
        ];
        let origin = Instant::now();
        let killed_at = Duration::from_millis(2_500);
        let log = Log::default();
        let mut random = seed;
        let mut next = move |below: u64| {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random % below
        };
        let mut operations = Vec::new();
        for (which, instance) in instances.iter().enumerate() {
            for _ in 0..40 {
                let at = Duration::from_millis(next(4_000));
                let kind = match next(30) {
                    0..=21 => Op::Call,
                    22..=28 => Op::GiveUp(Duration::from_millis(next(800))),
                    // No throttle once Redis is gone: its hold would be this instance's alone.
                    _ if at < killed_at => Op::Throttle(Duration::from_millis(next(400))),
                    _ => Op::Call,
                };
                operations.push(run_op(instance, which, origin, at, kind, &log));
            }
        }
        let killer = async {
            tokio::time::sleep_until((origin + killed_at).into()).await;
            server.kill();
        };
        tokio::join!(killer, futures::future::join_all(operations));

        let started = log.started.lock().unwrap().clone();
        let holds = log.holds.lock().unwrap().clone();
        let window = Duration::from_millis(950);
        let most_in_a_window = |starts: &[Duration]| {
            let mut starts = starts.to_vec();
            starts.sort();
            (0..starts.len())
                .map(|i| {
                    starts[i..]
                        .iter()
                        .take_while(|at| **at - starts[i] < window)
                        .count()
                })
                .max()
                .unwrap_or(0)
        };
        let while_up: Vec<_> = started
            .iter()
            .filter(|(_, at)| *at + window < killed_at)
            .map(|(_, at)| *at)
            .collect();
        assert!(
            most_in_a_window(&while_up) < COUNT + BURST,
            "seed {seed:#x}: together over the limit while Redis answers: {started:?}"
        );
        for (made, until) in &holds {
            let during = started.iter().find(|(_, at)| {
                *at > *made + Duration::from_millis(100) && *at + Duration::from_millis(20) < *until
            });
            assert!(
                during.is_none(),
                "seed {seed:#x}: {during:?} started during the hold from {made:?} to {until:?}"
            );
        }
        for which in 0..2 {
            let after: Vec<_> = started
                .iter()
                .filter(|(by, at)| *by == which && *at >= killed_at)
                .map(|(_, at)| *at)
                .collect();
            assert!(
                most_in_a_window(&after) < COUNT + BURST,
                "seed {seed:#x}: instance {which} over its own limit without Redis: {after:?}"
            );
        }
        assert!(
            while_up.len() >= 3,
            "seed {seed:#x}: the gate let calls through: {started:?}"
        );
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Call,
    /// Waits at most this long for its slot, then gives up (its slot goes back).
    GiveUp(Duration),
    /// The provider answers 429, asking to wait this long.
    Throttle(Duration),
}

/// What the model test saw: calls started `(instance, since the origin)`, holds `(from, to)`.
#[derive(Debug, Default)]
struct Log {
    started: Mutex<Vec<(usize, Duration)>>,
    holds: Mutex<Vec<(Duration, Duration)>>,
}

async fn run_op(
    instance: &Instance,
    which: usize,
    origin: Instant,
    at: Duration,
    op: Op,
    log: &Log,
) {
    tokio::time::sleep_until((origin + at).into()).await;
    let call = instance.policy.run(|| async {
        log.started.lock().unwrap().push((which, origin.elapsed()));
        match op {
            Op::Throttle(wait) => Err(ApiError::Throttled(wait)),
            _ => Ok(()),
        }
    });
    match op {
        Op::GiveUp(patience) => {
            let _ = tokio::time::timeout(patience, call).await;
        }
        Op::Throttle(wait) => {
            if call.await == Err(ApiError::Throttled(wait)) {
                let made = origin.elapsed();
                log.holds.lock().unwrap().push((made, made + wait));
            }
        }
        Op::Call => {
            let _ = call.await;
        }
    }
}
