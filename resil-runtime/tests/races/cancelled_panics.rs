//! Panics around an attempt's end: a listener that panics on `Cancelled` leaves no probe
//! held, an attempt is told ended once, and never with another operation's id (a hostile
//! review's proofs). On tokio's paused clock.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::TestError;
use futures::FutureExt;
use resil_runtime::events::{AttemptOutcome, Event, Listener};
use resil_runtime::{Breaker, BreakerState, Operation, Policy, PolicyBuilder};
use tokio::time::sleep;

/// An attempt's start or end: (a start, operation id, attempt, outcome).
type Told = (bool, Option<String>, u32, String);

#[derive(Debug, Default)]
struct Log {
    heard: Mutex<Vec<Told>>,
    panic_on_cancelled: bool,
    panic_on_first_end: Mutex<bool>,
}

impl Log {
    fn lines(&self) -> Vec<Told> {
        self.heard.lock().unwrap().clone()
    }
    /// Starts and ends that do not pair one to one on (operation, attempt).
    fn unpaired(&self) -> Vec<String> {
        let heard = self.lines();
        let mut starts: Vec<_> = heard
            .iter()
            .filter(|l| l.0)
            .map(|l| (l.1.clone(), l.2))
            .collect();
        let mut ends: Vec<_> = heard
            .iter()
            .filter(|l| !l.0)
            .map(|l| (l.1.clone(), l.2))
            .collect();
        starts.sort();
        ends.sort();
        if starts == ends {
            vec![]
        } else {
            vec![format!("starts {starts:?} ends {ends:?} in {heard:?}")]
        }
    }
}

impl Listener for Log {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::AttemptStarted {
                operation, attempt, ..
            } => self.heard.lock().unwrap().push((
                true,
                operation.map(|id| id.to_string()),
                *attempt,
                String::new(),
            )),
            Event::AttemptEnded {
                operation,
                attempt,
                outcome,
                ..
            } => {
                self.heard.lock().unwrap().push((
                    false,
                    operation.map(|id| id.to_string()),
                    *attempt,
                    format!("{outcome:?}"),
                ));
                if self.panic_on_cancelled && matches!(outcome, AttemptOutcome::Cancelled) {
                    panic!("listener panics on Cancelled");
                }
                if !matches!(outcome, AttemptOutcome::Cancelled)
                    && std::mem::take(&mut *self.panic_on_first_end.lock().unwrap())
                {
                    panic!("listener panics on the first end");
                }
            }
            _ => {}
        }
    }
}

// A listener that panics on Cancelled: the probe slot went back before it heard.

/// Opens `builder`'s breaker (threshold 1, cooldown 1 s), then drops its probe mid-call under
/// a listener that panics on `Cancelled` (the panic escapes the drop); the breaker.
async fn probe_dropped_under_a_panicking_listener(
    builder: PolicyBuilder,
) -> (Policy, Arc<Breaker>) {
    let log = Arc::new(Log {
        panic_on_cancelled: true,
        ..Log::default()
    });
    let policy = builder
        .timeout(Duration::from_secs(2))
        .listener(log)
        .build()
        .unwrap();
    let breaker = Arc::clone(policy.breaker().unwrap());
    let _ = policy
        .run(|| async { Err::<u32, _>(TestError::Busy) })
        .await;
    assert_eq!(breaker.state(), BreakerState::Open);
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut probe = Box::pin(policy.run(|| async {
        sleep(Duration::from_secs(10)).await;
        Ok::<u32, TestError>(1)
    }));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), probe.as_mut())
            .await
            .is_err()
    );
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(probe)));
    assert!(dropped.is_err(), "the listener's panic escapes the drop");
    (policy, breaker)
}

#[tokio::test(start_paused = true)]
async fn a_listener_that_panics_on_cancelled_leaves_no_probe_held() {
    let builder = Policy::builder().retry(0).breaker_named(
        "cancelled-panics-probe",
        1,
        Duration::from_secs(1),
    );
    let (policy, breaker) = probe_dropped_under_a_panicking_listener(builder).await;
    // The probe's slot should be free: the next caller probes and succeeds.
    let next = policy.run(|| async { Ok::<u32, TestError>(7) }).await;
    let later = policy.run(|| async { Ok::<u32, TestError>(8) }).await;
    assert_eq!(
        (next, later, breaker.state()),
        (Ok(7), Ok(8), BreakerState::Closed),
        "a probe slot was left held by the listener's panic"
    );
}

/// The same through a race (hedged policy): `cancel_all` gives back before it tells.
#[tokio::test(start_paused = true)]
async fn a_listener_that_panics_on_a_lost_racers_end_leaves_no_probe_held() {
    let builder = Policy::builder()
        .retry(1)
        .hedge(1, Duration::from_secs(1))
        .breaker_named("cancelled-panics-race", 1, Duration::from_secs(1));
    let (policy, breaker) = probe_dropped_under_a_panicking_listener(builder).await;
    let next = policy.run(|| async { Ok::<u32, TestError>(7) }).await;
    assert_eq!(
        (next, breaker.state()),
        (Ok(7), BreakerState::Closed),
        "a probe slot was left held by the listener's panic"
    );
}

// A panic caught around the poll, the attempt dropped later: told ended once, and never with
// another operation's id.

#[tokio::test(start_paused = true)]
async fn an_attempt_whose_end_a_listener_panicked_on_is_not_told_cancelled_too() {
    let log = Arc::new(Log {
        panic_on_first_end: Mutex::new(true),
        ..Log::default()
    });
    let policy = Policy::builder().listener(log.clone()).build().unwrap();
    let mut execution = policy.execute::<TestError>();
    let mut attempt = Box::pin(execution.attempt(async { Ok::<u32, TestError>(1) }));
    let caught = AssertUnwindSafe(attempt.as_mut()).catch_unwind().await;
    assert!(
        caught.is_err(),
        "the listener panicked at the attempt's end"
    );
    drop(attempt);
    let ends: Vec<_> = log
        .lines()
        .into_iter()
        .filter(|l| !l.0)
        .map(|l| (l.1.is_some(), l.2, l.3))
        .collect();
    assert_eq!(
        ends,
        [(true, 0, "Ok".to_owned())],
        "one end for one attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_a_panic_went_through_never_takes_another_operations_id() {
    let log = Arc::new(Log::default());
    let policy = Policy::builder().listener(log.clone()).build().unwrap();
    let mut execution = policy.execute::<TestError>();
    let mut attempt = Box::pin(execution.attempt(async {
        sleep(Duration::from_millis(10)).await;
        panic!("the body panics mid-call");
        #[allow(unreachable_code)]
        Ok::<u32, TestError>(1)
    }));
    let caught = AssertUnwindSafe(attempt.as_mut()).catch_unwind().await;
    assert!(caught.is_err());
    // Dropped later, inside the body of a call of another policy.
    let other = Policy::builder().build().unwrap();
    let mut held = Some(attempt);
    let other_id = other
        .run(|| {
            let attempt = held.take();
            async move {
                let id = Operation::current().map(|op| op.id().to_string());
                drop(attempt);
                Ok::<_, TestError>(id)
            }
        })
        .await
        .unwrap();
    let heard = log.lines();
    assert_eq!(
        heard.len(),
        1,
        "a panic went through the attempt: nothing more is told of it, never with another \
         operation's id ({other_id:?}); heard {heard:?}"
    );
}

// Without panics: every attempt told as started is told as ended, once.

#[tokio::test(start_paused = true)]
async fn hedges_dropped_mid_race_each_end_once() {
    let log = Arc::new(Log::default());
    let policy = Policy::builder()
        .retry(3)
        .hedge(2, Duration::from_millis(100))
        .listener(log.clone())
        .build()
        .unwrap();
    let call = policy.run(|| async {
        sleep(Duration::from_secs(10)).await;
        Ok::<u32, TestError>(1)
    });
    assert!(tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .is_err());
    assert_eq!(log.unpaired(), Vec::<String>::new());
    assert_eq!(log.lines().len(), 6, "{:?}", log.lines());
}

#[tokio::test(start_paused = true)]
async fn routed_hedges_cut_then_dropped_each_end_once() {
    let log = Arc::new(Log::default());
    let policy = Policy::builder()
        .retry(4)
        .timeout(Duration::from_millis(250))
        .hedge(1, Duration::from_millis(100))
        .backoff(Duration::from_millis(10), Duration::from_millis(20))
        .listener(log.clone())
        .build()
        .unwrap();
    let call = policy.run_routed("a", ["b", "c"], |_target: &str| async move {
        sleep(Duration::from_secs(10)).await;
        Ok::<u32, TestError>(1)
    });
    assert!(tokio::time::timeout(Duration::from_millis(430), call)
        .await
        .is_err());
    assert_eq!(log.unpaired(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_stream_races_loser_and_a_dropped_stream_each_end_once() {
    use futures::StreamExt;
    let log = Arc::new(Log::default());
    let policy = Policy::builder()
        .retry(2)
        .hedge(1, Duration::from_millis(100))
        .listener(log.clone())
        .build()
        .unwrap();
    let calls = Mutex::new(vec![1000u64, 10]);
    let stream = policy
        .run_stream(|| {
            let ms = calls.lock().unwrap().remove(0);
            async move {
                let items = futures::stream::once(async move {
                    sleep(Duration::from_millis(ms)).await;
                    Ok::<u64, TestError>(ms)
                })
                .chain(futures::stream::pending());
                Ok::<_, TestError>(Box::pin(items))
            }
        })
        .await
        .unwrap();
    let mut stream = Box::pin(stream);
    assert_eq!(stream.next().await, Some(Ok(10)));
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
    drop(stream);
    assert_eq!(log.unpaired(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn nested_calls_in_hedges_each_end_once() {
    let inner_log = Arc::new(Log::default());
    let inner = Policy::builder()
        .listener(inner_log.clone())
        .build()
        .unwrap();
    let outer_log = Arc::new(Log::default());
    let outer = Policy::builder()
        .retry(1)
        .hedge(1, Duration::from_millis(100))
        .listener(outer_log.clone())
        .build()
        .unwrap();
    let calls = Mutex::new(vec![10u64, 1]);
    let result = outer
        .run(|| {
            let secs = calls.lock().unwrap().remove(0);
            let inner = &inner;
            async move {
                inner
                    .run(|| async move {
                        sleep(Duration::from_secs(secs)).await;
                        Ok::<u64, TestError>(secs)
                    })
                    .await
            }
        })
        .await;
    assert_eq!(result, Ok(1));
    assert_eq!(outer_log.unpaired(), Vec::<String>::new());
    assert_eq!(inner_log.unpaired(), Vec::<String>::new());
}

/// After a wait for another call's probe verdict: where the attempt's timeout ends, what
/// the cut says, and what the ended event says.
#[tokio::test(start_paused = true)]
async fn a_timeout_after_a_probe_wait_keeps_its_end() {
    #[derive(Debug, Default)]
    struct Ends(Mutex<Vec<(u32, String, Duration)>>);
    impl Listener for Ends {
        fn on_event(&self, event: &Event<'_>) {
            if let Event::AttemptEnded {
                attempt,
                outcome,
                elapsed,
                ..
            } = event
            {
                self.0
                    .lock()
                    .unwrap()
                    .push((*attempt, format!("{outcome:?}"), *elapsed));
            }
        }
    }
    let ends = Arc::new(Ends::default());
    let policy = Policy::builder()
        .retry(0)
        .timeout(Duration::from_secs(2))
        .breaker_named("cancelled-panics-timeout", 1, Duration::from_secs(1))
        .listener(ends.clone())
        .build()
        .unwrap();
    let breaker = policy.breaker().unwrap().clone();
    let _ = policy
        .run(|| async { Err::<u32, _>(TestError::Busy) })
        .await;
    tokio::time::advance(Duration::from_secs(1)).await;
    // Hold the probe by hand for 1.5 s.
    let probe = breaker.admit().await.unwrap();
    assert!(probe.is_probe());
    let start = tokio::time::Instant::now();
    let waiter = async {
        let r = policy
            .run(|| async {
                sleep(Duration::from_secs(1)).await;
                Ok::<u32, TestError>(1)
            })
            .await;
        (r, start.elapsed())
    };
    let release = async {
        sleep(Duration::from_millis(1500)).await;
        probe.record(resil_runtime::Verdict::Success);
    };
    let ((result, took), ()) = tokio::join!(waiter, release);
    assert_eq!(
        took,
        Duration::from_secs(2),
        "the end kept: 2 s from the start"
    );
    assert!(
        format!("{result:?}").contains("Timeout { after: 2s }"),
        "{result:?}"
    );
    let ends = ends.0.lock().unwrap().clone();
    assert_eq!(
        ends[1..],
        [(
            0,
            "Rejected(Timeout { after: 2s })".to_owned(),
            Duration::from_millis(500)
        )],
        "the call's own time: admitted at 1.5 s, cut at 2 s"
    );
}
