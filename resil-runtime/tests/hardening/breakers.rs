//! Breakers: late verdicts of old generations, one breaker across two layers, listeners that
//! panic, the keyed registry's bound, and a retry that meets a breaker opened meanwhile.

use super::*;

// 2. Generations: a late verdict of an old generation counts for nothing.

#[tokio::test(start_paused = true)]
async fn calls_admitted_before_the_breaker_opened_cannot_reopen_it_after_a_probe_closed_it() {
    let breaker = breaker("generations", 2, SECOND);
    let late_one = breaker.admit().await.unwrap();
    let late_two = breaker.admit().await.unwrap();
    for _ in 0..2 {
        breaker.admit().await.unwrap().record(Verdict::Failure);
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    advance(SECOND).await;
    let probe = breaker.admit().await.unwrap();
    assert!(probe.is_probe());
    probe.record(Verdict::Success);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(late_one.record(Verdict::Failure), None);
    assert_eq!(late_two.record(Verdict::Failure), None);
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(
        breaker.failures(),
        0,
        "the old generation's failures were not counted"
    );
}

// 3. One breaker, two layers: the inner call goes through as part of the outer one.

#[tokio::test(start_paused = true)]
async fn a_nested_call_on_the_breaker_its_parent_probes_goes_through() {
    let shared = breaker("two-layers", 1, SECOND);
    let outer = Policy::builder()
        .timeout(Duration::from_secs(5))
        .breaker(shared.clone())
        .build()
        .unwrap();
    let inner = Policy::builder()
        .timeout(Duration::from_secs(5))
        .breaker(shared.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let result = outer
        .run(|| inner.run(|| provider.answer(Err(TestError::Busy))))
        .await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(shared.state(), BreakerState::Open);
    advance(SECOND).await;
    let started = Instant::now();
    let result = outer.run(|| inner.run(|| provider.answer(Ok(7)))).await;
    assert_eq!(result, Ok(7), "not a wait for its own verdict");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(shared.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn one_operation_through_two_layers_of_one_breaker_counts_once() {
    let shared = breaker("counts-once", 3, SECOND);
    let outer = Policy::builder().breaker(shared.clone()).build().unwrap();
    let inner = Policy::builder().breaker(shared.clone()).build().unwrap();
    let provider = Provider::default();
    let result = outer
        .run(|| inner.run(|| provider.answer(Err(TestError::Busy))))
        .await;
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(shared.failures(), 1);
}

// 4. A panicking listener cannot leave a probe slot or a permit held.

#[derive(Debug)]
struct PanicOn(&'static str);

impl Listener for PanicOn {
    fn on_event(&self, event: &Event<'_>) {
        let kind = match event {
            Event::AttemptStarted { .. } => "started",
            Event::AttemptEnded { .. } => "ended",
            Event::Waiting { .. } => "waiting",
            Event::Rejected { .. } => "rejected",
            Event::GaveUp { .. } => "gave_up",
            Event::BreakerTransition { transition, .. } => match transition.to {
                BreakerState::Open => "to_open",
                BreakerState::HalfOpen => "to_half_open",
                BreakerState::Closed => "to_closed",
            },
            _ => "other",
        };
        if kind == self.0 {
            panic!("listener panics on {kind}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_listener_that_panics_on_any_event_leaves_nothing_held() {
    for kind in [
        "started",
        "ended",
        "waiting",
        "rejected",
        "gave_up",
        "to_open",
        "to_half_open",
        "to_closed",
    ] {
        let shared = breaker(kind, 1, SECOND);
        let policy = Policy::builder()
            .retry(1)
            .backoff(SECOND, SECOND)
            .breaker(shared.clone())
            .bulkhead(1)
            .listener(Arc::new(PanicOn(kind)))
            .build()
            .unwrap();
        let provider = Provider::default();
        let script = [
            Err(TestError::Busy),
            Err(TestError::Busy),
            Ok(1),
            Ok(1),
            Ok(1),
        ];
        for answer in script {
            // Bounded, so a leaked probe slot fails the test instead of hanging it.
            let run = AssertUnwindSafe(policy.run(|| provider.answer(answer.clone())));
            let _ = tokio::time::timeout(Duration::from_secs(10), run.catch_unwind()).await;
            advance(Duration::from_secs(2)).await;
            assert_eq!(policy.bulkhead().unwrap().in_flight(), 0, "{kind}");
        }
        // The slot was freed: a caller after the cooldown is admitted, never left waiting.
        advance(Duration::from_secs(2)).await;
        let admitted = tokio::time::timeout(SECOND, shared.admit()).await;
        assert!(
            matches!(admitted, Ok(Ok(_))),
            "{kind}: {:?}",
            shared.state()
        );
    }
}

// 6. The keyed registry is bounded, whatever its keys went through.

#[tokio::test(start_paused = true)]
async fn the_keyed_registry_stays_within_max_keys() {
    let keyed =
        KeyedBreakers::new("user", BreakerConfig::new(3, SECOND).unwrap()).with_max_keys(10);
    for user in 0..10_000 {
        let breaker = keyed.get(&user);
        breaker.admit().await.unwrap().record(Verdict::Failure);
        if user % 2 == 0 {
            for _ in 0..2 {
                breaker.admit().await.unwrap().record(Verdict::Failure);
            }
        }
        assert!(keyed.len() <= 10, "{} breakers at user {user}", keyed.len());
    }
    advance(Duration::from_secs(86_400)).await;
    let held: Vec<_> = (0..100).map(|n| keyed.get(&format!("new-{n}"))).collect();
    assert_eq!(keyed.len(), 100, "in-use breakers are never evicted");
    drop(held);
    for n in 0..100 {
        keyed.get(&format!("newer-{n}"));
    }
    assert!(keyed.len() <= 10, "{}", keyed.len());
}

#[test]
fn a_lookup_racing_a_sweep_never_hands_out_an_orphan_breaker() {
    let keyed = Arc::new(KeyedBreakers::new("k", BreakerConfig::default()).with_max_keys(8));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _clock = runtime.enter();
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let keyed = keyed.clone();
            let handle = runtime.handle().clone();
            scope.spawn(move || {
                let _clock = handle.enter();
                for round in 0..2_000 {
                    let held = keyed.get("hot");
                    // Fresh keys force sweeps while `hot` is looked up again.
                    keyed.get(&format!("cold-{thread}-{round}"));
                    let again = keyed.get("hot");
                    assert!(std::ptr::eq::<Breaker>(&*held, &*again));
                }
            });
        }
    });
}

// 13. A retry that meets a breaker opened during its wait ends with the provider's error.

#[tokio::test(start_paused = true)]
async fn a_breaker_opened_during_the_backoff_ends_the_operation_with_the_last_error() {
    let shared = breaker("opened-meanwhile", 2, Duration::from_secs(30));
    let policy = Policy::builder()
        .retry(2)
        .backoff(SECOND, SECOND)
        .jitter(Jitter::None)
        .breaker(shared.clone())
        .build()
        .unwrap();
    let provider = Provider::default();
    let operation = policy.run(|| provider.answer(Err(TestError::Busy)));
    let other_caller = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        shared.admit().await.unwrap().record(Verdict::Failure);
    };
    let (result, ()) = tokio::join!(operation, other_caller);
    assert_eq!(result, Err(TestError::Busy));
    assert_eq!(provider.calls(), 1);
}
