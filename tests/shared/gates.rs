//! Rate gates, shared through a real Redis: the combined rate holds, a throttle seen by one
//! instance holds the others, a slot given up goes back everywhere, and two instances share
//! one schedule. What load cannot break only: counts, order, "held at least until"; the
//! spacing to the microsecond is checked on the paused clock through the in-memory store
//! (`resil-runtime/src/shared/memory/tests/`).

use super::*;

/// Redis's answers count even on a loaded machine (`shared_timeout` at its most, 1 s): a
/// late one would leave the instances to decide alone, and these tests to test that.
fn patient(p: resil::PolicyBuilder) -> resil::PolicyBuilder {
    p.shared_timeout(Duration::from_secs(1))
}

/// Clock readings of this process and Redis's, compared: µs rounding on either side.
const ROUNDING: Duration = Duration::from_millis(1);

#[tokio::test]
async fn a_shared_gate_holds_the_combined_rate() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 10 a minute with a 1 s deadline: the 11th call's slot is 6 s away, so it is refused.
    let gated = |p: resil::PolicyBuilder| {
        patient(p)
            .rate(10, Duration::from_secs(60), 10)
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
    assert_eq!(
        gate_keys(&server, "resil:{gate:"),
        ["resil:{gate:two::instances}:rate"]
    );
    assert_eq!(
        server.keys("resil:{gate:two::instances}:rate:seen"),
        ["resil:{gate:two::instances}:rate:seen"],
        "the instances that use it, beside it"
    );
}

/// One call through `instance` that the provider throttles, asking to wait `wait`.
async fn throttle(instance: &Instance, wait: Duration) {
    let throttled = instance
        .policy
        .run(|| async { Err::<(), _>(ApiError::Throttled(wait)) })
        .await;
    assert_eq!(throttled, Err(ApiError::Throttled(wait)));
}

/// `result` is a refusal for a slot not before `until`: the call returned at `returned`.
fn refused_until(result: &Result<(), ApiError>, returned: Instant, until: Instant) -> bool {
    matches!(result, Err(ApiError::Rejected(Rejected::RateLimited { retry_in }))
        if returned + *retry_in + ROUNDING >= until)
}

#[tokio::test]
async fn a_throttle_seen_by_one_instance_holds_the_others() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let gated = |p: resil::PolicyBuilder| {
        patient(p)
            .rate(100, Duration::from_secs(1), 100)
            .deadline(Duration::from_millis(500))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    // Longer than b may take to see it: the hold is written in the background.
    let wait = SETTLE_WITHIN + Duration::from_secs(5);
    let before = Instant::now();
    throttle(&a, wait).await;
    let calls = Calls::default();
    loop {
        let result = call(&b.policy, &calls, Ok(())).await;
        if result != Ok(()) {
            assert!(
                refused_until(&result, Instant::now(), before + wait),
                "held at least until the 429's wait is over: {result:?}"
            );
            break;
        }
        assert!(
            before.elapsed() < SETTLE_WITHIN,
            "b never held within {SETTLE_WITHIN:?}"
        );
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
    // One a minute: b's refusal below comes well within the period, however slow the machine.
    let period = Duration::from_secs(60);
    let gated = |p: resil::PolicyBuilder| {
        patient(p)
            .rate(1, period, 1)
            .deadline(Duration::from_secs(5))
    };
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let before = Instant::now();
    throttle(&a, Duration::from_millis(1)).await;
    // The hold is written in the background; it counts itself in `epoch` (or, before the
    // fix, let the key expire at once).
    let gate = "resil:{gate:two::instances}:rate";
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
        refused_until(&refused, Instant::now(), before + period),
        "a's call took the period's slot: {refused:?}"
    );
    assert_eq!(calls.count(), 0);
}

#[tokio::test]
async fn a_slot_given_up_goes_back_to_every_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // One a minute: a's second call waits a minute for its slot, b's is refused within it.
    let interval = Duration::from_secs(60);
    let gated = |p: resil::PolicyBuilder| patient(p).rate(1, interval, 1);
    let (a, b) = (
        instance(&server, gated).await,
        instance(&server, gated).await,
    );
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    let first_done = Instant::now();
    let tat = || {
        server.query::<Option<String>>(
            redis::cmd("HGET")
                .arg("resil:{gate:two::instances}:rate")
                .arg("tat"),
        )
    };
    let after_first = tat();
    // A's second call waits for the next slot, and its caller gives up before.
    let given_up =
        tokio::time::timeout(Duration::from_millis(100), call(&a.policy, &calls, Ok(()))).await;
    assert!(given_up.is_err(), "still waiting for its slot");
    // The refund is written in the background: the schedule goes back to where it was.
    eventually("the slot is back in Redis", || tat() == after_first).await;
    // B is offered the slot a gave up (a minute after a's first), not the one after it.
    let b_policy = Policy::builder()
        .name("two::instances")
        .rate(1, interval, 1)
        .deadline(Duration::from_secs(1))
        .shared_timeout(Duration::from_secs(1))
        .shared_in(&b.store)
        .build()
        .unwrap();
    let asked = Instant::now();
    match call(&b_policy, &calls, Ok(())).await {
        Err(ApiError::Rejected(Rejected::RateLimited { retry_in })) => assert!(
            asked + retry_in <= first_done + interval + ROUNDING,
            "b's slot is {:?} after a's first call",
            (asked + retry_in).duration_since(first_done)
        ),
        other => panic!("the slot is a minute away: {other:?}"),
    }
    assert_eq!(calls.count(), 1);
}

/// A takes the first slot and holds its answer until B has been promised the next two; then
/// the provider throttles A. B's promised slots are revoked: its calls start once the hold is
/// over, not before. (The hold reaches B in the background: it must arrive before B's first
/// slot, 1.5 s on; a hold heard later leaves the slots already due, as the in-memory store's
/// tests show to the microsecond.)
#[tokio::test]
async fn a_throttle_revokes_the_slots_other_instances_already_reserved() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 2 every 3 s, no burst: slots 1.5 s apart across both instances.
    let gated = |p: resil::PolicyBuilder| patient(p).rate(2, Duration::from_secs(3), 1);
    let (a, b) = (
        Arc::new(instance(&server, gated).await),
        Arc::new(instance(&server, gated).await),
    );
    let wait = Duration::from_millis(3500);
    let answer = Arc::new(tokio::sync::Notify::new());
    let throttled = tokio::spawn({
        let (a, answer) = (Arc::clone(&a), Arc::clone(&answer));
        async move {
            a.policy
                .run(|| async {
                    answer.notified().await;
                    Err::<(), _>(ApiError::Throttled(wait))
                })
                .await
        }
    });
    // The schedule's end in Redis (µs on its clock).
    let tat = || {
        let key = gate_keys(&server, "resil:{gate:").pop()?;
        server.query::<u64>(redis::cmd("HGET").arg(&key).arg("tat"))
    };
    eventually("A's slot", || tat().is_some()).await;
    let after_a = tat().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (b, calls) = (Arc::clone(&b), Arc::clone(&calls));
            tokio::spawn(async move {
                b.policy
                    .run(|| async {
                        calls.lock().unwrap().push(Instant::now());
                        Ok::<(), ApiError>(())
                    })
                    .await
            })
        })
        .collect();
    eventually("B's two slots", || {
        tat().is_some_and(|tat| tat >= after_a + 3_000_000)
    })
    .await;
    let answered = Instant::now();
    answer.notify_one();
    assert_eq!(throttled.await.unwrap(), Err(ApiError::Throttled(wait)));
    for waiter in waiters {
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), 2);
    // The hold began when Redis heard of the 429, after A's answer was released.
    assert!(
        calls.iter().all(|at| *at + ROUNDING >= answered + wait),
        "B called during A's hold: {:?} after the answer",
        calls
            .iter()
            .map(|at| at.duration_since(answered))
            .collect::<Vec<_>>()
    );
}

/// Two instances run seeded random calls and calls given up while they wait, through one
/// schedule in Redis, which is killed midway. While it answers, the two together start no more
/// calls by any time than the gate's schedule holds from the start (a bound that late
/// wake-ups only loosen); once it is gone, each goes on alone. The same model with throttles,
/// windows of exactly one period and the limits after the kill, on the paused clock:
/// `two_instances_keep_the_gate_model_with_the_store_and_without_it` in the in-memory store's
/// tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_one_schedule_through_redis_and_go_on_without_it() {
    const COUNT: u32 = 5;
    const BURST: u32 = 2;
    let period = Duration::from_secs(1);
    for seed in [0x9e37_79b9_7f4a_7c15_u64, 0x2545_f491_4f6c_dd1d] {
        let Some(mut server) = RedisServer::start() else {
            return;
        };
        let events = listen(&server);
        let gated = |p: resil::PolicyBuilder| {
            patient(p)
                .rate(COUNT.into(), period, BURST.into())
                .deadline(Duration::from_secs(2))
        };
        let instances = [
            instance(&server, gated).await,
            instance(&server, gated).await,
        ];
        let origin = Instant::now();
        let killed_at = Duration::from_millis(2_500);
        let started = Mutex::new(Vec::new());
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
                let patience = match next(30) {
                    0..=21 => None,
                    _ => Some(Duration::from_millis(next(800))),
                };
                operations.push(run_op(instance, which, origin, at, patience, &started));
            }
        }
        let killer = async {
            tokio::time::sleep_until((origin + killed_at).into()).await;
            server.kill();
        };
        tokio::join!(killer, futures::future::join_all(operations));

        let started = started.into_inner().unwrap();
        // Redis answers until it is killed, or until a stall on a loaded machine passes for
        // an outage; then the local gates decide.
        let answered = events
            .first_outage
            .lock()
            .unwrap()
            .map_or(killed_at, |at| at.duration_since(origin).min(killed_at));
        let mut while_up: Vec<_> = started
            .iter()
            .filter(|(_, at)| *at < answered)
            .map(|(_, at)| *at)
            .collect();
        while_up.sort();
        // The n-th slot of a gate of COUNT a period with BURST at once is no sooner than
        // (n - BURST) intervals after the first; a call starts at its slot or later.
        let interval = period / COUNT;
        for (n, at) in (1_u64..).zip(&while_up) {
            let allowed = (*at + ROUNDING).as_nanos() / interval.as_nanos();
            assert!(
                u128::from(n) <= allowed + u128::from(BURST),
                "seed {seed:#x}: {n} calls by {at:?}, together over the schedule: {started:?}"
            );
        }
        assert!(
            started.iter().filter(|(_, at)| *at < killed_at).count() >= 3,
            "seed {seed:#x}: the gate let calls through: {started:?}"
        );
        for which in 0..2 {
            assert!(
                started
                    .iter()
                    .any(|(by, at)| *by == which && *at >= killed_at),
                "seed {seed:#x}: instance {which} went on after the kill: {started:?}"
            );
        }
    }
}

/// At `at` after `origin`, one call through `instance`, given up after `patience` if any;
/// notes when it started, and by which instance.
async fn run_op(
    instance: &Instance,
    which: usize,
    origin: Instant,
    at: Duration,
    patience: Option<Duration>,
    started: &Mutex<Vec<(usize, Duration)>>,
) {
    tokio::time::sleep_until((origin + at).into()).await;
    let call = instance.policy.run(|| async {
        started.lock().unwrap().push((which, origin.elapsed()));
        Ok::<(), ApiError>(())
    });
    match patience {
        Some(patience) => {
            let _ = tokio::time::timeout(patience, call).await;
        }
        None => {
            let _ = call.await;
        }
    }
}

#[tokio::test]
async fn keys_holding_braces_stay_apart_in_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // A tenant's text never ends or splits the key's hash tag: `a}b` is not `a`, and `{x}`
    // is not `%7Bx%7D`, though a naive tag would take `{x}` for its own. (A key printed with
    // odd characters is quoted.)
    let tenants = ["a}b", "a", "{x}", "%7Bx%7D"];
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("llm::tenants")
            .keyed("tenant")
            .rate(1, Duration::from_secs(60), 1)
            .rate_per_key()
            .deadline(Duration::from_secs(1))
            .shared_in(&store)
            .shared_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    for tenant in tenants {
        assert_eq!(
            a.run_keyed(tenant, || async { Ok::<(), ApiError>(()) })
                .await,
            Ok(()),
            "{tenant}'s one slot a minute is its own"
        );
        assert!(
            matches!(
                b.run_keyed(tenant, || async { Ok::<(), ApiError>(()) })
                    .await,
                Err(ApiError::Rejected(Rejected::RateLimited { .. }))
            ),
            "{tenant}'s slot is shared by both instances"
        );
    }
    assert_eq!(
        gate_keys(&server, "resil:{gate:llm::tenants:"),
        [
            "resil:{gate:llm::tenants:tenant=\"%257Bx%257D\"}:rate",
            "resil:{gate:llm::tenants:tenant=\"%7Bx%7D\"}:rate",
            "resil:{gate:llm::tenants:tenant=\"a%7Db\"}:rate",
            "resil:{gate:llm::tenants:tenant=a}:rate",
        ]
    );
}
