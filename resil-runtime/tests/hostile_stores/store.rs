//! Stores a team might write, buggy or hostile, handed to resil through the public trait: a
//! store's mistakes may make the shared state wrong, but never hang a call, wait past its
//! deadline, or leave a breaker stuck.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use resil_runtime::shared::{
    conformance, Announcement, BreakerLink, BreakerNews, GateLink, GateNews, InMemory, Probe,
    Reservation, Reserved, SharedStore, Slot, StoreFuture, Unavailable,
};
use resil_runtime::{Breaker, BreakerConfig, BreakerState, Policy, Rejected};

use super::{call, Failure};
use tokio::time::Instant;

use super::counting;

/// How a [`Hostile`] store misbehaves.
#[derive(Default)]
struct Faults {
    /// `announce` hands the news to every handle of that name, this instance's too, at once.
    echo: AtomicBool,
    /// `reserve` grants an hour's wait, whatever the limit.
    late_grant: AtomicBool,
    /// `reserve` grants at once, saying the schedule now runs an hour ahead.
    far_ahead: AtomicBool,
    /// `acquire_probe` never answers.
    probe_hangs: AtomicBool,
    /// `acquire_probe` asks the inner store for an hour's lock, whatever the limit.
    probe_never_expires: AtomicBool,
    /// The next `reserve` panics.
    reserve_panics: AtomicBool,
    /// The next `announce` panics.
    announce_panics: AtomicBool,
}

/// A store of a team's own, around an [`InMemory`] one, with [`Faults`].
struct Hostile {
    inner: InMemory,
    faults: Faults,
    breakers: Mutex<Vec<BreakerNews>>,
    probes: AtomicU64,
}

impl Hostile {
    fn new(inner: InMemory) -> Arc<Self> {
        Arc::new(Hostile {
            inner,
            faults: Faults::default(),
            breakers: Mutex::default(),
            probes: AtomicU64::new(0),
        })
    }
}

impl SharedStore for Hostile {
    fn usable(&self) -> bool {
        self.inner.usable()
    }

    fn listen_breaker(&self, breaker: BreakerNews) {
        self.breakers.lock().unwrap().push(breaker.clone());
        self.inner.listen_breaker(breaker);
    }

    fn listen_gate(&self, gate: GateNews) {
        self.inner.listen_gate(gate);
    }

    fn announce(&self, announcement: Announcement) {
        if self.faults.announce_panics.swap(false, Ordering::AcqRel) {
            panic!("a store that panics in announce");
        }
        if self.faults.echo.load(Ordering::Acquire) {
            let listed = self.breakers.lock().unwrap().clone();
            for breaker in listed.iter().filter(|b| b.name() == announcement.breaker()) {
                if let resil_runtime::shared::Change::Opened(left) = announcement.change() {
                    breaker.opened_elsewhere(left);
                }
            }
        }
        self.inner.announce(announcement);
    }

    fn acquire_probe<'a>(
        &'a self,
        breaker: &'a BreakerLink,
        limit: Duration,
    ) -> StoreFuture<'a, Result<Probe, Unavailable>> {
        self.probes.fetch_add(1, Ordering::AcqRel);
        if self.faults.probe_hangs.load(Ordering::Acquire) {
            return Box::pin(std::future::pending());
        }
        let limit = match self.faults.probe_never_expires.load(Ordering::Acquire) {
            true => Duration::from_secs(3600),
            false => limit,
        };
        self.inner.acquire_probe(breaker, limit)
    }

    fn release_probe(&self, breaker: &BreakerLink) {
        self.inner.release_probe(breaker);
    }

    fn reserve<'a>(
        &'a self,
        reservation: &'a Reservation,
    ) -> StoreFuture<'a, Result<Reserved, Unavailable>> {
        if self.faults.reserve_panics.swap(false, Ordering::AcqRel) {
            panic!("a store that panics in reserve");
        }
        if self.faults.late_grant.load(Ordering::Acquire) {
            let slots: Vec<_> = reservation
                .asks()
                .map(|_| Slot::new(0, 1, 0, Duration::from_secs(3600)))
                .collect();
            return Box::pin(std::future::ready(Ok(Reserved::granted(
                Duration::from_secs(3600),
                slots,
            ))));
        }
        if self.faults.far_ahead.load(Ordering::Acquire) {
            let slots: Vec<_> = reservation
                .asks()
                .map(|_| Slot::new(0, 1, 0, Duration::from_secs(3600)))
                .collect();
            return Box::pin(std::future::ready(Ok(Reserved::granted(
                Duration::ZERO,
                slots,
            ))));
        }
        self.inner.reserve(reservation)
    }

    fn refund(&self, gate: &GateLink, slot: Slot) {
        self.inner.refund(gate, slot);
    }

    fn hold(&self, gate: &GateLink, wait: Duration) {
        self.inner.hold(gate, wait);
    }
}

fn shared_breaker(store: &Arc<Hostile>, cooldown: Duration) -> Policy {
    let config = BreakerConfig::new(1, cooldown).expect("a valid breaker");
    Policy::builder()
        .breaker(Arc::new(Breaker::new("hostile", config)))
        .shared_in(Arc::clone(store))
        .shared_timeout(Duration::from_millis(100))
        .build()
        .expect("a valid policy")
}

/// Runs `test` on a thread of its own, failing if it has not ended within `limit`: a hang is
/// a failure, not a stuck test run.
fn within(limit: Duration, what: &str, test: impl FnOnce() + Send + 'static) {
    let (done, ended) = mpsc::channel();
    std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match ended.recv_timeout(limit) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung for {limit:?}: {what}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("panicked: {what}"),
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn a_store_that_delivers_an_opening_inside_announce_does_not_hang_the_call() {
    within(
        Duration::from_secs(20),
        "a call whose breaker opened",
        || {
            current_thread().block_on(async {
                let store = Hostile::new(InMemory::new());
                store.faults.echo.store(true, Ordering::Release);
                let policy = shared_breaker(&store, Duration::from_secs(30));
                let _ = call(&policy, false).await;
                assert_eq!(policy.breaker().unwrap().state(), BreakerState::Open);
            });
        },
    );
}

#[test]
fn two_instances_of_one_in_memory_state_opening_at_once_do_not_deadlock() {
    within(
        Duration::from_secs(60),
        "two instances opening at once",
        || {
            let here = InMemory::new();
            let there = here.instance();
            let threads: Vec<_> = [here, there]
                .into_iter()
                .map(|store| {
                    std::thread::spawn(move || {
                        current_thread().block_on(async move {
                            let config = BreakerConfig::new(1, Duration::from_secs(30)).unwrap();
                            let breaker = Arc::new(Breaker::new("abba", config));
                            let policy = Policy::builder()
                                .breaker(Arc::clone(&breaker))
                                .shared_in(&store)
                                .build()
                                .unwrap();
                            for _ in 0..20_000 {
                                breaker.reset();
                                let _ = call(&policy, false).await;
                            }
                        });
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
        },
    );
}

#[tokio::test(start_paused = true)]
async fn a_grant_that_waits_past_the_deadline_does_not_hold_the_call_past_it() {
    let store = Hostile::new(InMemory::new());
    store.faults.late_grant.store(true, Ordering::Release);
    let policy = Policy::builder()
        .name("late_grant")
        .rate(10, Duration::from_secs(1), 10)
        .deadline(Duration::from_secs(1))
        .shared_in(Arc::clone(&store))
        .build()
        .unwrap();
    let started = Instant::now();
    let answer = call(&policy, true).await;
    assert!(
        started.elapsed() <= Duration::from_secs(1),
        "a deadline of 1 s, waited {:?} ({answer:?})",
        started.elapsed()
    );
    assert!(
        matches!(answer, Err(Failure::Rejected(Rejected::RateLimited { .. }))),
        "no slot within the deadline: {answer:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_grant_saying_the_schedule_runs_an_hour_ahead_leaves_fail_open_to_the_local_gate() {
    let store = Hostile::new(InMemory::new());
    store.faults.far_ahead.store(true, Ordering::Release);
    let policy = Policy::builder()
        .name("far_ahead")
        .rate(10, Duration::from_secs(1), 10)
        .deadline(Duration::from_secs(1))
        .shared_in(Arc::clone(&store))
        .build()
        .unwrap();
    call(&policy, true).await.expect("granted at once");
    store.inner.set_available(false);
    let answer = call(&policy, true).await;
    assert!(
        answer.is_ok(),
        "one call of a burst of 10 made, the store down: the local gate decides ({answer:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_the_store_decides_its_probe_leaves_the_breaker_usable() {
    let store = Hostile::new(InMemory::new());
    let cooldown = Duration::from_secs(1);
    let policy = shared_breaker(&store, cooldown);
    let _ = call(&policy, false).await;
    tokio::time::sleep(cooldown).await;
    store.faults.probe_hangs.store(true, Ordering::Release);
    let dropped = tokio::time::timeout(Duration::from_millis(10), call(&policy, true)).await;
    assert!(dropped.is_err(), "dropped while asking for the probe");
    store.faults.probe_hangs.store(false, Ordering::Release);
    assert!(call(&policy, true).await.is_ok(), "the next call probes");
    assert_eq!(policy.breaker().unwrap().state(), BreakerState::Closed);
}

/// Both instances' breakers are open, cooled down; the store answers too late. Here, the
/// probe asks for the store's lock (50 ms); meanwhile there, a probe that failed open fails,
/// and its opening reaches here. The probe here was of the generation that opening ended:
/// when the store's answer times out it makes no call, the breaker open again.
#[tokio::test(start_paused = true)]
async fn a_probe_whose_breaker_opened_elsewhere_while_it_asked_the_store_makes_no_call() {
    let here = InMemory::new();
    let there = here.instance();
    let policy = |store: &InMemory, timeout: u64| {
        let config = BreakerConfig::new(1, Duration::from_secs(1)).unwrap();
        Policy::builder()
            .breaker(Arc::new(Breaker::new("probe-race", config)))
            .shared_in(store)
            .shared_timeout(Duration::from_millis(timeout))
            .build()
            .unwrap()
    };
    let (a, b) = (policy(&here, 50), policy(&there, 20));
    let _ = call(&a, false).await;
    assert_eq!(b.breaker().unwrap().state(), BreakerState::Open);
    tokio::time::sleep(Duration::from_secs(1)).await;
    here.set_slow(true);
    let called = AtomicBool::new(false);
    let (answer, failed) = tokio::join!(
        a.run(|| async {
            called.store(true, Ordering::SeqCst);
            Ok::<_, Failure>(())
        }),
        call(&b, false)
    );
    assert!(matches!(failed, Err(Failure::Down)), "{failed:?}");
    assert!(
        matches!(answer, Err(Failure::Rejected(Rejected::BreakerOpen { .. }))),
        "{answer:?}"
    );
    assert!(
        !called.load(Ordering::SeqCst),
        "the probe called, its breaker open"
    );
    assert_eq!(a.breaker().unwrap().state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_panics_poisons_nothing() {
    let store = Hostile::new(InMemory::new());
    let cooldown = Duration::from_secs(1);
    let policy = Arc::new({
        let config = BreakerConfig::new(1, cooldown).unwrap();
        Policy::builder()
            .breaker(Arc::new(Breaker::new("panics", config)))
            .rate(10, Duration::from_secs(1), 10)
            .shared_in(Arc::clone(&store))
            .build()
            .unwrap()
    });
    store.faults.reserve_panics.store(true, Ordering::Release);
    let panicked = tokio::spawn({
        let policy = Arc::clone(&policy);
        async move { call(&policy, true).await }
    })
    .await;
    assert!(panicked.is_err_and(|error| error.is_panic()));
    assert!(call(&policy, true).await.is_ok(), "the next call goes");
    store.faults.announce_panics.store(true, Ordering::Release);
    let panicked = tokio::spawn({
        let policy = Arc::clone(&policy);
        async move { call(&policy, false).await }
    })
    .await;
    assert!(panicked.is_err_and(|error| error.is_panic()));
    assert_eq!(policy.breaker().unwrap().state(), BreakerState::Open);
    tokio::time::sleep(cooldown).await;
    assert!(call(&policy, true).await.is_ok(), "a probe goes");
    assert_eq!(policy.breaker().unwrap().state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn news_through_a_handle_after_its_policy_is_gone_does_nothing() {
    let store = Hostile::new(InMemory::new());
    let policy = shared_breaker(&store, Duration::from_secs(1));
    let handle = store.breakers.lock().unwrap()[0].clone();
    handle.opened_elsewhere(Duration::MAX);
    assert_eq!(policy.breaker().unwrap().state(), BreakerState::Open);
    assert!(
        policy.breaker().unwrap().retry_in(Instant::now()) <= Duration::from_secs(1),
        "at most its own cooldown"
    );
    drop(policy);
    assert!(handle.is_gone());
    std::thread::spawn(move || {
        handle.opened_elsewhere(Duration::MAX);
        handle.closed_elsewhere();
        assert!(handle.untold().is_none());
    })
    .join()
    .unwrap();
}

/// Runs the suite over `store`'s instances; `Ok` if it failed (panicked), `Err` if it hung or
/// passed.
async fn suite_fails(
    store: impl Fn(InMemory) -> Arc<Hostile> + Send + Sync + 'static,
) -> Result<(), String> {
    let state = InMemory::new();
    let suite = tokio::spawn(async move {
        let run = conformance::run(|| std::future::ready(store(state.instance())));
        tokio::time::timeout(Duration::from_secs(24 * 3600), run).await
    });
    match suite.await {
        Err(error) if error.is_panic() => Ok(()),
        Err(error) => Err(format!("the suite ended with {error}")),
        Ok(Ok(())) => Err("the suite passed a broken store".to_owned()),
        Ok(Err(_)) => Err("the suite hung for a day".to_owned()),
    }
}

#[tokio::test(start_paused = true)]
async fn the_suite_fails_a_store_whose_probe_never_answers() {
    let answer = suite_fails(|inner| {
        let store = Hostile::new(inner);
        store.faults.probe_hangs.store(true, Ordering::Release);
        store
    })
    .await;
    answer.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_suite_fails_a_store_whose_probe_lock_never_expires() {
    let answer = suite_fails(|inner| {
        let store = Hostile::new(inner);
        store
            .faults
            .probe_never_expires
            .store(true, Ordering::Release);
        store
    })
    .await;
    answer.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_suite_fails_a_store_that_grants_everything() {
    let answer = suite_fails(|inner| {
        let store = Hostile::new(inner);
        store.faults.late_grant.store(true, Ordering::Release);
        store
    })
    .await;
    answer.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_breaker_listed_after_a_peer_opened_learns_of_the_opening() {
    let here = InMemory::new();
    let there = here.instance();
    let shared = |store: &InMemory| {
        let config = BreakerConfig::new(1, Duration::from_secs(30)).unwrap();
        Policy::builder()
            .breaker(Arc::new(Breaker::new("late", config)))
            .shared_in(store)
            .build()
            .unwrap()
    };
    let early = shared(&here);
    let _ = call(&early, false).await;
    assert_eq!(early.breaker().unwrap().state(), BreakerState::Open);
    let late = shared(&there);
    assert_eq!(
        late.breaker().unwrap().state(),
        BreakerState::Open,
        "an opening in force is delivered when a breaker is listed (SharedStore::listen_breaker)"
    );
}

#[test]
fn one_in_memory_state_made_outside_a_runtime_holds_one_limit_across_runtimes() {
    let store = InMemory::new();
    within(
        Duration::from_secs(30),
        "two runtimes sharing a gate",
        move || {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        current_thread().block_on(async move {
                            let policy = Policy::builder()
                                .name("two_runtimes")
                                .rate(3, Duration::from_secs(3600), 3)
                                .deadline(Duration::from_millis(50))
                                .shared_in(&store)
                                .build()
                                .unwrap();
                            let mut passed = 0;
                            for _ in 0..3 {
                                passed += u32::from(call(&policy, true).await.is_ok());
                            }
                            passed
                        })
                    })
                })
                .collect();
            let passed: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
            assert_eq!(passed, 3, "the two runtimes together keep the burst");
        },
    );
}

#[tokio::test(start_paused = true)]
async fn an_in_memory_store_forgets_the_schedules_of_keys_long_past() {
    let store = InMemory::new();
    let policy = Policy::builder()
        .name("many_keys")
        .keyed("tenant")
        .rate(10, Duration::from_secs(1), 10)
        .rate_per_key()
        .max_keys(100)
        .shared_in(&store)
        .build()
        .unwrap();
    let batch = |from: u32| {
        let policy = &policy;
        async move {
            for key in from..from + 10_000 {
                let _ = policy
                    .run_keyed(&format!("tenant-{key}"), || async { Ok::<_, Failure>(()) })
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    };
    // Two rounds to reach the store's largest tables: what it keeps of keys in force.
    batch(0).await;
    batch(10_000).await;
    let before = counting::live_bytes();
    for round in 2..5 {
        batch(round * 10_000).await;
    }
    let grown = counting::live_bytes() - before;
    assert!(
        grown < 200_000,
        "30 000 keys long past, at most 100 kept: the store still holds {grown} bytes more"
    );
}
