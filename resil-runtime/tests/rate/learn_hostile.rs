//! Learning gates and adaptive bulkheads against hostile answers, cancellation, many keys
//! and many threads, through the public API only: what a hostile review of issue 35 found
//! (each test says what once went wrong) and the guards it kept. Memory is counted by a
//! global allocator that tracks the bytes each thread keeps.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use futures::FutureExt;
use resil_runtime::{operation, Bulkhead, Policy, ProviderLimits, Quota, Rejected};
use tokio::time::{sleep, Instant};

use crate::common::TestError;

/// Counts the bytes live on the current thread, so that a test on a current-thread runtime
/// sees its own allocations only (tests of this binary run in parallel on other threads).
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(bytes: isize) {
    let _ = LIVE.try_with(|live| live.set(live.get() + bytes));
}

// SAFETY: forwards to the system allocator, only counting.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            add(layout.size() as isize);
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        add(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            add(new_size as isize - layout.size() as isize);
        }
        new
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

pub(super) fn live() -> isize {
    LIVE.with(Cell::get)
}

pub(super) fn requests(quota: Quota) -> ProviderLimits {
    ProviderLimits {
        requests: Some(quota),
        tokens: None,
    }
}

pub(super) fn said(limit: Option<u64>, remaining: u64, reset: Duration) -> Quota {
    Quota {
        limit,
        remaining,
        reset,
        window: None,
    }
}

pub(super) async fn answers(quota: Quota) -> Result<(), TestError> {
    operation::report_limits(requests(quota));
    Ok(())
}

pub(super) async fn silent() -> Result<(), TestError> {
    Ok(())
}

pub(super) const SEC: Duration = Duration::from_secs(1);
pub(super) const MS: Duration = Duration::from_millis(1);

/// Net bytes kept after `calls` more calls through `policy` whose bodies report nothing.
async fn kept_by_silent_calls(policy: &Policy, calls: usize) -> isize {
    for _ in 0..1_000 {
        policy.run(silent).await.unwrap();
    }
    let before = live();
    for _ in 0..calls {
        policy.run(silent).await.unwrap();
    }
    live() - before
}

/// (memory): a learning gate books every slot in `Learning::booked`, and only an
/// answer that states a quota trims it (`learn` returns at `let quota = quota?` before the
/// `retain`). A provider that never sends the headers (or a body that never reports) makes
/// the deque grow by one entry per call, for ever; `unbook`'s `retain` then costs O(n) per
/// refund.
#[tokio::test(start_paused = true)]
async fn a_declared_learning_gate_keeps_nothing_per_call_when_answers_say_nothing() {
    let policy = Policy::builder()
        .rate(1_000_000_000, SEC, 1_000_000)
        .rate_learn()
        .build()
        .unwrap();
    let kept = kept_by_silent_calls(&policy, 100_000).await;
    assert!(
        kept < 256 * 1024,
        "{kept} bytes kept after 100k silent calls"
    );
}

/// (memory), as above for `rate = "auto"`: after its probe is answered without a
/// word, every call books a slot that nothing ever trims.
#[tokio::test(start_paused = true)]
async fn an_auto_gate_keeps_nothing_per_call_when_answers_say_nothing() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    let kept = kept_by_silent_calls(&policy, 100_000).await;
    assert!(
        kept < 256 * 1024,
        "{kept} bytes kept after 100k silent calls"
    );
}

///: `Quota` is public with public fields, and `report_limits` passes it to the gate
/// unclamped (only the header parsers clamp `remaining` to `limit`). An auto gate told
/// "10 per window, 1 000 000 left" hands out 1 000 000 at once before the reset: the
/// provider answers 429 from the 11th.
#[tokio::test(start_paused = true)]
async fn an_auto_gate_hands_out_no_more_than_the_stated_limit_at_once() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    let inconsistent = said(Some(10), 1_000_000, SEC);
    policy.run(|| answers(inconsistent)).await.unwrap();
    let gate = policy.rate_gate().unwrap();
    let at_once = (0..100)
        .filter(|_| gate.reserve(1, None) == Ok(Duration::ZERO))
        .count();
    assert!(
        at_once <= 10,
        "{at_once} slots at once against a limit of 10"
    );
}

/// (throughput): the window is `fetch_max`ed and never forgotten, so ONE answer with a
/// far reset (a hostile or garbled header, an Anthropic reset a day ahead...) pins it at
/// `retry_after_max` (60 s by default) for the gate's life: the pace becomes limit per 60 s.
/// Here a declared 10/s gate, whose provider honestly says 10 per second ever after, runs at
/// one call every 6 s: 20 calls take ~2 minutes instead of ~2 s.
#[tokio::test(start_paused = true)]
async fn one_far_reset_does_not_slow_a_learning_gate_for_ever() {
    let policy = Policy::builder()
        .rate(10, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let far = said(Some(10), 5, Duration::from_secs(86_400 * 365));
    policy.run(|| answers(far)).await.unwrap();
    let start = Instant::now();
    for _ in 0..20 {
        let honest = said(Some(10), 9, 500 * MS);
        policy.run(|| answers(honest)).await.unwrap();
    }
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "20 calls at a stated 10/s took {took:?}"
    );
}

/// (cross-talk): `HEARD` is one thread-local cell keyed by stack depth only, cleared
/// only by `heard()`. A body that reports and then panics leaves it set; the next learning
/// call at the same depth on that thread (any policy) takes it as its own answer. Here
/// policy B is held 2 s by what policy A's provider said.
#[tokio::test(start_paused = true)]
async fn a_report_left_by_a_panicking_body_is_not_heard_by_another_policy() {
    let a = Policy::builder()
        .rate(100, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let b = Policy::builder()
        .rate(100, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let spent = said(Some(10), 0, 2 * SEC);
    let panicked = AssertUnwindSafe(a.run(|| async move {
        operation::report_limits(requests(spent));
        if spent.remaining == 0 {
            panic!("the body panics after reporting");
        }
        Ok::<(), TestError>(())
    }))
    .catch_unwind()
    .await;
    assert!(panicked.is_err());
    b.run(|| async {
        sleep(10 * MS).await;
        Ok::<(), TestError>(())
    })
    .await
    .unwrap();
    let wait = b.rate_gate().unwrap().reserve(1, None).unwrap();
    assert!(wait < 100 * MS, "B held {wait:?} by what A's provider said");
}

/// (lost answer): a nested learning call's body that reports in the same poll as its
/// outer call's body overwrites the outer report in the single `HEARD` cell: the outer gate
/// never hears "nothing left" and keeps sending (into 429s).
#[tokio::test(start_paused = true)]
async fn an_inner_calls_report_does_not_erase_the_outer_calls() {
    let outer = Policy::builder()
        .rate(100, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let inner = Policy::builder()
        .rate(100, SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let spent = said(Some(10), 0, 2 * SEC);
    let plenty = said(Some(100), 99, SEC);
    outer
        .run(|| async {
            operation::report_limits(requests(spent));
            inner
                .run(|| async {
                    operation::report_limits(requests(plenty));
                    sleep(10 * MS).await;
                    Ok::<(), TestError>(())
                })
                .await?;
            Ok::<(), TestError>(())
        })
        .await
        .unwrap();
    let wait = outer.rate_gate().unwrap().reserve(1, None).unwrap();
    assert!(
        wait >= Duration::from_millis(1900),
        "outer gate waits only {wait:?}: its provider said nothing is left for 2 s"
    );
}

/// Guard: hostile quotas (u64::MAX, limit 0, reset 0 and Duration::MAX, window 0 and MAX,
/// flapping) from 2000 tasks over 50 keys on a multi-thread runtime, some cancelled at once,
/// some while waiting: no panic, no hang, and afterwards each key's gates, of requests and
/// of tokens, take a call again within a second (none shut by a stated limit of 0, none
/// stalled by a hostile reset: every hold ends within retry_after_max).
#[test]
fn hostile_answers_from_many_tasks_and_keys_never_panic_nor_hang() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let policy = Arc::new(
            Policy::builder()
                .keyed("model")
                .rate_learn()
                .rate_per_key()
                .token_rate_learn()
                .token_rate_per_key()
                .timeout(Duration::from_millis(200))
                .retry_after_max(Duration::from_millis(50))
                .build()
                .unwrap(),
        );
        let hostile = Arc::new([
            Quota {
                limit: Some(0),
                remaining: u64::MAX,
                reset: Duration::MAX,
                window: Some(Duration::ZERO),
            },
            Quota {
                limit: Some(u64::MAX),
                remaining: 0,
                reset: Duration::ZERO,
                window: Some(Duration::MAX),
            },
            Quota {
                limit: None,
                remaining: u64::MAX,
                reset: Duration::from_nanos(1),
                window: None,
            },
            Quota {
                limit: Some(1),
                remaining: 0,
                reset: Duration::MAX,
                window: None,
            },
            Quota {
                limit: Some(3),
                remaining: 2,
                reset: Duration::ZERO,
                window: Some(Duration::from_nanos(1)),
            },
        ]);
        let panics = Arc::new(AtomicUsize::new(0));
        let tasks = (0..2000usize).map(|n| {
            let (policy, hostile) = (Arc::clone(&policy), Arc::clone(&hostile));
            tokio::spawn(async move {
                let key = format!("k{}", n % 50);
                let quota = hostile[n % hostile.len()];
                let call = policy.run_keyed(key.as_str(), || async move {
                    operation::report_limits(ProviderLimits {
                        requests: Some(quota),
                        tokens: Some(quota),
                    });
                    if n % 7 == 0 {
                        sleep(Duration::from_millis(20)).await;
                    }
                    Ok::<(), TestError>(())
                });
                let budget = match n % 5 {
                    0 => Duration::ZERO,
                    1 => Duration::from_millis(5),
                    _ => Duration::from_secs(10),
                };
                let _ = tokio::time::timeout(budget, call).await;
            })
        });
        let all = tokio::time::timeout(Duration::from_secs(60), join_all(tasks))
            .await
            .expect("2000 calls did not finish in 60 s: a hang");
        for task in all {
            if task.is_err() {
                panics.fetch_add(1, Ordering::Relaxed);
            }
        }
        assert_eq!(panics.load(Ordering::Relaxed), 0, "tasks panicked");
        // The slots of callers that gave up mid-queue stay spent: let them pass.
        sleep(Duration::from_secs(3)).await;
        let keys = policy.keys().unwrap();
        for n in 0..50 {
            let key = keys.get(&format!("k{n}"));
            let gates = [key.rate_gate(), key.token_gate()];
            for gate in gates.into_iter().map(Option::unwrap) {
                let within = Instant::now() + SEC;
                let wait = gate.reserve(1, Some(within));
                assert!(wait.is_ok(), "key k{n}: {wait:?} ({gate:?})");
            }
        }
    });
}

/// Guard: an adaptive bulkhead with a queue, its limit cut by throttles while callers are
/// queued and cancelled: once all are gone, nothing is in flight or waiting, and as many
/// calls as its limit get in at once.
#[tokio::test(start_paused = true)]
async fn an_adaptive_bulkhead_with_a_queue_leaks_no_place_under_cancellation() {
    let policy = Arc::new(
        Policy::builder()
            .bulkhead_adaptive(2, 32)
            .bulkhead_queue(8)
            .build()
            .unwrap(),
    );
    let calls = (0..400usize).map(|n| {
        let policy = Arc::clone(&policy);
        tokio::spawn(async move {
            sleep(Duration::from_millis((n % 40) as u64)).await;
            let call = policy.run(|| async move {
                sleep(Duration::from_millis(10 + (n % 13) as u64)).await;
                match n % 3 {
                    0 => Err(TestError::Throttled(Duration::ZERO)),
                    _ => Ok(()),
                }
            });
            let budget = Duration::from_millis(if n % 4 == 0 { 3 } else { 1000 });
            let _ = tokio::time::timeout(budget, call).await;
        })
    });
    for call in join_all(calls).await {
        call.unwrap();
    }
    let bulkhead = policy.bulkhead().unwrap();
    assert_eq!((bulkhead.in_flight(), bulkhead.waiting()), (0, 0));
    let limit = bulkhead.limit();
    let held: Vec<_> = (0..limit).map(|_| bulkhead.try_acquire()).collect();
    assert!(
        held.iter().all(Result::is_ok),
        "limit {limit}, not all got in"
    );
    assert!(bulkhead.try_acquire().is_err());
}

/// Guard: an adaptive bulkhead at its bounds (1..1) under a storm of throttles and
/// timeouts: its limit stays 1, and nothing is left in flight.
#[tokio::test(start_paused = true)]
async fn an_adaptive_bulkhead_of_one_survives_a_storm() {
    let policy = Arc::new(
        Policy::builder()
            .bulkhead_adaptive(1, 1)
            .bulkhead_queue(4)
            .timeout(Duration::from_millis(5))
            .build()
            .unwrap(),
    );
    let calls = (0..50usize).map(|n| {
        let policy = Arc::clone(&policy);
        tokio::spawn(async move {
            let _ = policy
                .run(|| async move {
                    sleep(Duration::from_millis(if n % 2 == 0 { 10 } else { 1 })).await;
                    match n % 3 {
                        0 => Err::<(), _>(TestError::Throttled(Duration::ZERO)),
                        _ => Ok(()),
                    }
                })
                .await;
        })
    });
    for call in join_all(calls).await {
        call.unwrap();
    }
    let bulkhead: &Bulkhead = policy.bulkhead().unwrap();
    assert_eq!((bulkhead.limit(), bulkhead.in_flight()), (1, 0));
    let _ = Rejected::DeadlineExceeded;
}

/// (stall): an auto token gate has no burst, so "any cost passes" (`reserve_slot`
/// skips the OverBurst check for `auto`): one call whose cost is far above what the provider
/// allows per window (a bad estimate, or a hostile `set_cost`) pushes the schedule
/// `cost × pace` ahead, saturating at u64::MAX. Every later call then waits for centuries:
/// refused, or hung without a deadline. Here 1000 tokens/s learnt, one call of a billion
/// tokens: the next call of 1 token, past the reset, waits ~11.6 days (with u64::MAX, 584
/// years).
#[tokio::test(start_paused = true)]
async fn one_huge_cost_does_not_stall_an_auto_token_gate_past_retry_after_max() {
    let policy = Policy::builder().token_rate_learn().build().unwrap();
    let tokens = said(Some(1000), 1000, SEC);
    policy
        .run(|| async move {
            operation::report_limits(ProviderLimits {
                requests: None,
                tokens: Some(tokens),
            });
            Ok::<(), TestError>(())
        })
        .await
        .unwrap();
    let gate = policy.token_gate().unwrap();
    let huge = gate.reserve(1_000_000_000, None);
    // Past the reset, so that what the answer said was left (the spare) is gone.
    sleep(2 * SEC).await;
    let next = gate.reserve(1, None);
    assert!(
        next.clone()
            .is_ok_and(|wait| wait <= Duration::from_secs(60)),
        "after one call of 1e9 tokens ({huge:?}), the next waits {next:?}"
    );
}

/// (stampede): a probe that failed without any answer (a transport error: no HTTP
/// answer, no headers) counts as "answered" (`learn(!matches!(outcome, Rejected(_)))`):
/// it ends the probing for good with nothing learnt, and the auto gate then runs at 1 ns a
/// call: the 40 callers the probe was meant to hold all go at once.
#[tokio::test(start_paused = true)]
async fn a_probe_that_failed_without_an_answer_keeps_the_others_held() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    let failed = policy.run(|| async { Err::<(), _>(TestError::Busy) }).await;
    assert!(failed.is_err());
    let gate = policy.rate_gate().unwrap();
    let waits: Vec<_> = (0..40).map(|_| gate.reserve(1, None).unwrap()).collect();
    let at_once = waits
        .iter()
        .filter(|wait| **wait < Duration::from_millis(1))
        .count();
    assert!(
        at_once <= 1,
        "{at_once} of 40 callers sent within 1 ms after a probe that got no answer"
    );
}

/// Measure (not a bug per se): a probe slower than PROBE_LOST (1 s; LLM calls often take
/// 10 s or more) is taken for lost, and another caller probes every second: against a
/// provider allowing 3 per window, a 10 s call lets ~10 probes out before the first answer.
#[tokio::test(start_paused = true)]
async fn a_slow_probe_is_not_taken_for_lost_every_second() {
    let policy = Arc::new(
        Policy::builder()
            .rate_learn()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    let sent = Arc::new(AtomicUsize::new(0));
    let first_answer = Arc::new(std::sync::Mutex::new(None::<usize>));
    let calls = (0..40).map(|_| {
        let (policy, sent, first_answer) = (
            Arc::clone(&policy),
            Arc::clone(&sent),
            Arc::clone(&first_answer),
        );
        async move {
            let _ = policy
                .run(|| {
                    let (sent, first_answer) = (Arc::clone(&sent), Arc::clone(&first_answer));
                    async move {
                        sent.fetch_add(1, Ordering::SeqCst);
                        sleep(Duration::from_secs(10)).await;
                        first_answer
                            .lock()
                            .unwrap()
                            .get_or_insert(sent.load(Ordering::SeqCst));
                        answers(said(Some(3), 2, Duration::from_secs(60))).await
                    }
                })
                .await;
        }
    });
    join_all(calls).await;
    let before_answer = first_answer.lock().unwrap().unwrap();
    assert!(
        before_answer <= 2,
        "{before_answer} calls sent before the first answer came back"
    );
}
