//! Model checks of the breaker's state machine and the bulkhead's counter: loom runs every
//! interleaving of the threads below. Run with
//! `LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg resil_loom" cargo test -p resil-runtime --lib --release loom`
//! (the bound keeps the three-thread bulkhead model to seconds).

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use tokio::time::Instant;

use crate::breaker::{Admit, Breaker, BreakerConfig, BreakerState, Verdict};
use crate::Bulkhead;

fn breaker(threshold: u32) -> Arc<Breaker> {
    let config = BreakerConfig::new(threshold, Duration::from_nanos(1)).unwrap();
    Arc::new(Breaker::new("loom", config))
}

fn fail(breaker: &Breaker) -> Option<crate::breaker::Transition> {
    match breaker.try_admit_closed() {
        Admit::Pass(admission) => admission.record(Verdict::Failure),
        _ => None,
    }
}

#[test]
fn loom_bulkhead_never_exceeds_its_limit_and_never_leaks() {
    loom::model(|| {
        let bulkhead = Arc::new(Bulkhead::new(2).unwrap());
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let bulkhead = bulkhead.clone();
                thread::spawn(move || {
                    let permit = bulkhead.try_acquire();
                    assert!(bulkhead.in_flight() <= 2);
                    permit.is_ok()
                })
            })
            .collect();
        let admitted = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|ok| *ok)
            .count();
        assert!(admitted >= 1);
        assert_eq!(bulkhead.in_flight(), 0);
    });
}

#[test]
fn loom_concurrent_failures_open_the_breaker_exactly_once() {
    loom::model(|| {
        let breaker = breaker(2);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let breaker = breaker.clone();
                thread::spawn(move || fail(&breaker).is_some())
            })
            .collect();
        let opened = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|opened| *opened)
            .count();
        assert_eq!(opened, 1);
        assert_eq!(breaker.state(), BreakerState::Open);
    });
}

#[test]
fn loom_a_late_failure_of_an_old_generation_never_reopens_a_closed_breaker() {
    loom::model(|| {
        let breaker = breaker(1);
        let Admit::Pass(old) = breaker.try_admit_closed() else {
            unreachable!("a new breaker is closed")
        };
        let (ticket, _) = old.detach();
        let later = Instant::now() + Duration::from_secs(1);
        let late = {
            let breaker = breaker.clone();
            thread::spawn(move || breaker.record(ticket, Verdict::Failure))
        };
        let recovery = {
            let breaker = breaker.clone();
            thread::spawn(move || {
                fail(&breaker);
                match breaker.try_admit(|| later) {
                    Admit::Pass(probe) => probe.record(Verdict::Success),
                    other => panic!("the cooldown passed, yet {other:?}"),
                }
            })
        };
        late.join().unwrap();
        recovery.join().unwrap();
        assert_eq!(breaker.state(), BreakerState::Closed);
    });
}

#[test]
fn loom_half_open_admits_exactly_one_probe() {
    loom::model(|| {
        let breaker = breaker(1);
        fail(&breaker);
        let later = Instant::now() + Duration::from_secs(1);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let breaker = breaker.clone();
                thread::spawn(move || match breaker.try_admit(|| later) {
                    Admit::Pass(admission) => {
                        let probe = u32::from(admission.is_probe());
                        admission.record(Verdict::Success);
                        probe
                    }
                    Admit::Wait => 0,
                    Admit::Reject(rejected) => panic!("rejected: {rejected}"),
                })
            })
            .collect();
        let probes: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // The other caller either waited on the probe or came through after its success.
        assert_eq!(probes, 1);
        assert_eq!(breaker.state(), BreakerState::Closed);
    });
}

#[test]
fn loom_a_dropped_probe_never_wedges_the_breaker() {
    loom::model(|| {
        let breaker = breaker(1);
        fail(&breaker);
        let later = Instant::now() + Duration::from_secs(1);
        let dropper = {
            let breaker = breaker.clone();
            thread::spawn(move || {
                if let Admit::Pass(admission) = breaker.try_admit(|| later) {
                    drop(admission);
                }
            })
        };
        let other = {
            let breaker = breaker.clone();
            thread::spawn(move || {
                if let Admit::Pass(admission) = breaker.try_admit(|| later) {
                    admission.record(Verdict::Failure);
                }
            })
        };
        dropper.join().unwrap();
        other.join().unwrap();
        // Whatever happened, a later caller is not stuck waiting forever.
        let much_later = later + Duration::from_secs(1);
        assert!(!matches!(breaker.try_admit(|| much_later), Admit::Wait));
    });
}
