//! What no answer may do to a learning gate, however hostile or flapping (issue 44): shut it
//! for good, lift it past its declared ceiling, or hold its callers past `retry_after_max`.

use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use resil_runtime::{operation, Policy, PolicyBuilder, Priority, ProviderLimits, Quota, Rejected};
use tokio::time::Instant;

use super::learn_hostile::{answers, said, MS, SEC};
use super::learn_in_turn;
use crate::common::TestError;

/// A body that reports `quota` as its answer's tokens limit.
pub(super) async fn tokens_answer(quota: Quota) -> Result<(), TestError> {
    operation::report_limits(ProviderLimits {
        requests: None,
        tokens: Some(quota),
    });
    Ok(())
}

/// A stated limit of 0 once became the auto gate's burst: every later call was refused
/// `OverBurst { burst: 0 }` without a call, so no answer could ever reopen it.
#[tokio::test(start_paused = true)]
async fn a_stated_limit_of_zero_holds_an_auto_gate_until_its_reset_not_for_ever() {
    let policy = Policy::builder()
        .rate_learn()
        .timeout(5 * SEC)
        .build()
        .unwrap();
    policy.run(|| answers(said(Some(0), 0, SEC))).await.unwrap();
    let start = Instant::now();
    let next = policy.run(|| answers(said(Some(10), 9, SEC))).await;
    assert_eq!(next, Ok(()), "refused without a call");
    assert_eq!(start.elapsed(), SEC, "held until the reset, then called");
    let gate = policy.rate_gate().unwrap();
    assert_eq!(gate.reserve(1, None), Ok(Duration::ZERO), "9 left, at once");
}

/// A limit of 0 stated once, then answers that state no limit (an IETF field without its
/// policy): the stale 0 clamped what each later answer said was left to nothing, so every
/// answer held the gate until its reset, for good. A limit holds until its answer's reset.
#[tokio::test(start_paused = true)]
async fn a_stated_limit_is_forgotten_at_its_reset_by_answers_that_state_none() {
    let policy = Policy::builder()
        .rate_learn()
        .timeout(5 * SEC)
        .build()
        .unwrap();
    policy.run(|| answers(said(Some(0), 0, SEC))).await.unwrap();
    for _ in 0..3 {
        policy.run(|| answers(said(None, 50, SEC))).await.unwrap();
    }
    let start = Instant::now();
    for _ in 0..5 {
        policy.run(|| answers(said(None, 50, SEC))).await.unwrap();
    }
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "50 left: five calls at once"
    );
}

/// The same for a token gate told once (a flapping answer) that its limit is 1 token: a call
/// costing more is refused until that answer's reset, not for ever.
#[tokio::test(start_paused = true)]
async fn a_limit_stated_once_caps_a_calls_cost_only_until_its_reset() {
    let policy = Policy::builder().token_rate_learn().build().unwrap();
    policy
        .run(|| tokens_answer(said(Some(1), 1, SEC)))
        .await
        .unwrap();
    let costing = |cost| {
        let policy = &policy;
        async move {
            let mut execution = policy.execute::<TestError>();
            execution.set_cost(cost);
            let resil_runtime::Next::Done(outcome) = execution
                .attempt(tokens_answer(said(Some(1000), 900, SEC)))
                .await
            else {
                panic!("no retry declared")
            };
            outcome.into_result()
        }
    };
    assert_eq!(
        costing(100).await,
        Err(TestError::Rejected(Rejected::OverBurst {
            cost: 100,
            burst: 1
        })),
        "above the limit stated, before its reset"
    );
    tokio::time::sleep(SEC).await;
    assert_eq!(costing(100).await, Ok(()), "the reset is past");
    assert_eq!(costing(100).await, Ok(()), "1000 stated since");
}

/// An honest provider allowing `limit` units per fixed window of `period`, stating it on
/// every answer (of requests, or of tokens), each answer 20 ms after its request; records
/// when each call started and its units.
struct Honest {
    limit: u64,
    period: Duration,
    tokens: bool,
    /// Says a million are left, until a reset 1 ms away, whatever it counted.
    hostile: bool,
    origin: Instant,
    counted: Mutex<(u128, u64)>,
    starts: Mutex<Vec<(Duration, u64)>>,
}

impl Honest {
    fn new(limit: u64, period: Duration, tokens: bool) -> Self {
        Honest {
            limit,
            period,
            tokens,
            hostile: false,
            origin: Instant::now(),
            counted: Mutex::new((0, 0)),
            starts: Mutex::new(Vec::new()),
        }
    }

    async fn call(&self, units: u64) -> Result<(), TestError> {
        let elapsed = self.origin.elapsed();
        self.starts.lock().unwrap().push((elapsed, units));
        let index = elapsed.as_nanos() / self.period.as_nanos();
        let reset = self.period
            - Duration::from_nanos((elapsed.as_nanos() % self.period.as_nanos()) as u64);
        let remaining = {
            let mut counted = self.counted.lock().unwrap();
            if counted.0 != index {
                *counted = (index, 0);
            }
            counted.1 += units;
            self.limit.saturating_sub(counted.1)
        };
        tokio::time::sleep(20 * MS).await;
        let quota = Some(match self.hostile {
            false => said(Some(self.limit), remaining, reset),
            true => said(Some(1_000_000), 1_000_000, MS),
        });
        operation::report_limits(match self.tokens {
            true => ProviderLimits {
                requests: None,
                tokens: quota,
            },
            false => ProviderLimits {
                requests: quota,
                tokens: None,
            },
        });
        Ok(())
    }

    /// The most units started in any window of `period` (a gate of `count` per period with
    /// `burst` lets `count + burst - 1` at most).
    fn most_in(&self, period: Duration) -> u64 {
        most_in(self.starts.lock().unwrap().clone(), period)
    }
}

/// The most units started in any window of `period`, of `starts` (when, and how many units).
pub(super) fn most_in(mut starts: Vec<(Duration, u64)>, period: Duration) -> u64 {
    starts.sort();
    (0..starts.len())
        .map(|first| {
            (starts[first..].iter())
                .take_while(|(at, _)| *at < starts[first].0 + period)
                .map(|(_, units)| units)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

/// The classes callers take in turn, for a policy that serves its waiters by priority.
pub(super) const CLASSES: [Priority; 3] = [Priority::Batch, Priority::Critical, Priority::Default];

/// `builder`, serving its waiters by priority if `ordered` (in its gates' waiting rooms,
/// which book one slot at a time for whoever is next: a learning gate's promises hold there
/// too).
pub(super) fn ordered_if(builder: PolicyBuilder, ordered: bool) -> PolicyBuilder {
    match ordered {
        true => builder.by_priority(),
        false => builder,
    }
}

/// An attempt of `policy` of class `CLASSES[n % 3]` costing `units`, calling `body`.
async fn call_as<F>(policy: &Policy, n: u32, units: u64, body: F)
where
    F: std::future::Future<Output = Result<(), TestError>>,
{
    let class = CLASSES[n as usize % 3];
    let _ = learn_in_turn::once(policy.execute(), class, units, body).await;
}

/// `rate = "10/s"`, burst 10, `learn = true`, against a provider allowing 100 a second: each
/// answer gave the burst's credit back, and 50 calls started in one second. The same against
/// a hostile provider saying a million are left until a reset 1 ms away, and with callers of
/// each class served by priority.
#[tokio::test(start_paused = true)]
async fn a_declared_rate_that_learns_keeps_its_ceiling_in_every_window() {
    for (hostile, ordered) in [(false, false), (true, false), (false, true), (true, true)] {
        let builder = Policy::builder().rate(10, SEC, 10).rate_learn();
        let policy = ordered_if(builder, ordered)
            .timeout(60 * SEC)
            .build()
            .unwrap();
        let mut provider = Honest::new(100, SEC, false);
        provider.hostile = hostile;
        let (policy, provider) = (&policy, &provider);
        // A caller every 20 ms, 50 a second, for 3 s.
        join_all((0..150u32).map(|n| async move {
            tokio::time::sleep(n * 20 * MS).await;
            call_as(policy, n, 1, provider.call(1)).await;
        }))
        .await;
        let most = provider.most_in(SEC);
        assert!(
            most < 10 + 10,
            "{most} calls started in one second (hostile: {hostile}, ordered: {ordered})"
        );
        assert_eq!(provider.starts.lock().unwrap().len(), 150, "all called");
    }
}

/// `token_rate = "1000/s"` (burst 1000), `learn = true`, against a provider allowing
/// 100 000 tokens a minute: 9 500 tokens started in one second.
#[tokio::test(start_paused = true)]
async fn a_declared_token_rate_that_learns_keeps_its_ceiling_in_every_window() {
    for ordered in [false, true] {
        let builder = Policy::builder()
            .token_rate(1000, SEC, 1000)
            .token_rate_learn();
        let policy = ordered_if(builder, ordered).build().unwrap();
        let (policy, provider) = (&policy, &Honest::new(100_000, 60 * SEC, true));
        // A call of 100 tokens every 10 ms, 10 000 tokens a second, for 3 s.
        join_all((0..300u32).map(|n| async move {
            tokio::time::sleep(n * 10 * MS).await;
            call_as(policy, n, 100, provider.call(100)).await;
        }))
        .await;
        let most = provider.most_in(SEC);
        assert!(
            most < 1000 + 1000,
            "{most} tokens started in one second (ordered: {ordered})"
        );
    }
}

/// Each caller's wait before its call started, for `calls` callers at once through `policy`
/// against `provider`, each call costing `units`.
/// Their classes take turns (see [`CLASSES`]).
async fn waits(policy: &Policy, provider: &Honest, calls: u32, units: u64) -> Vec<Duration> {
    join_all((0..calls).map(|n| async move {
        let asked = Instant::now();
        let started = std::sync::OnceLock::new();
        let call = async {
            let _ = started.set(asked.elapsed());
            provider.call(units).await
        };
        call_as(policy, n, units, call).await;
        started.get().copied().unwrap_or(Duration::MAX)
    }))
    .await
}

/// An auto gate told once "1 a minute" among honest answers of 100 a minute: the callers
/// that came meanwhile were booked a minute apart, and kept those slots when the next answer
/// said 100 a minute again: the twelfth waited 660 s.
#[tokio::test(start_paused = true)]
async fn one_flapping_answer_holds_an_auto_gates_callers_no_longer_than_retry_after_max() {
    for ordered in [false, true] {
        let policy = ordered_if(Policy::builder().rate_learn(), ordered)
            .build()
            .unwrap();
        let provider = Honest::new(100, 60 * SEC, false);
        policy.run(|| provider.call(1)).await.unwrap();
        policy
            .run(|| answers(said(Some(1), 1, 60 * SEC)))
            .await
            .unwrap();
        let waits = waits(&policy, &provider, 12, 1).await;
        let longest = waits.iter().max().unwrap();
        // Placed again at 100 a minute once the first of them is answered (in a waiting
        // room, its next looks at its slot again as a caller in arrival order does).
        assert!(
            *longest <= 8 * SEC,
            "{longest:?}: held at the flapping answer's pace ({waits:?}, ordered: {ordered})"
        );
    }
}

/// A declared token gate (100 000 a minute) told once that its limit is 1 token a minute:
/// the next call of 100 tokens took 100 minutes of its schedule, and the one after it waited
/// for them although every answer since was honest.
#[tokio::test(start_paused = true)]
async fn one_flapping_answer_stalls_a_token_gate_no_longer_than_retry_after_max() {
    for ordered in [false, true] {
        let builder = Policy::builder()
            .token_rate(100_000, 60 * SEC, 10_000)
            .token_rate_learn();
        let policy = ordered_if(builder, ordered).build().unwrap();
        let provider = Honest::new(100_000, 60 * SEC, true);
        waits(&policy, &provider, 1, 100).await;
        call_as(&policy, 0, 100, tokens_answer(said(Some(1), 1, 60 * SEC))).await;
        let mut longest = Duration::ZERO;
        for calls in [1, 1, 5, 1] {
            let waits = waits(&policy, &provider, calls, 100).await;
            longest = longest.max(*waits.iter().max().unwrap());
        }
        assert!(
            longest <= 60 * SEC,
            "{longest:?}: held past retry_after_max by one answer (ordered: {ordered})"
        );
    }
}

/// An auto gate against a provider stating 10 requests per fixed window of 10 s: the window
/// it learnt from the resets shrank period after period (the longest reset of a period is
/// what was left of the window at its first call), and the rate it ran at rose to 1.19/s at
/// 20 s and 1.40/s at 30 s.
#[tokio::test(start_paused = true)]
async fn a_learnt_rate_is_never_above_what_the_provider_states() {
    let policy = Policy::builder().rate_learn().build().unwrap();
    let provider = Honest::new(10, 10 * SEC, false);
    let gate = policy.rate_gate().unwrap();
    let start = Instant::now();
    let mut highest = 0.0f64;
    // A caller slower than the limit, calling every 1.7 s: the first call in each window
    // comes later and later into it.
    while start.elapsed() < 120 * SEC {
        let _ = policy.run(|| provider.call(1)).await;
        highest = highest.max(gate.learnt_rate().unwrap_or(0.0));
        tokio::time::sleep(1700 * MS).await;
    }
    // The first answer states a reset a few milliseconds short of the window.
    assert!(highest <= 1.01, "learnt {highest}/s against 10 per 10 s");
}

/// One attempt of `execution` on `body`, to its end (no retry declared).
async fn once<F>(
    mut execution: resil_runtime::Execution<'_, TestError>,
    body: F,
) -> Result<(), TestError>
where
    F: std::future::Future<Output = Result<(), TestError>>,
{
    match execution.attempt(body).await {
        resil_runtime::Next::Done(outcome) => outcome.into_result(),
        resil_runtime::Next::Retry => unreachable!("no retry declared"),
    }
}

/// An answer whose pace brings a learning gate's schedule sooner places the slots ahead
/// again; a slot given up in the middle of the queue brought it sooner at a pace a little
/// slower than declared (10 per 10.5 s against 10 per 10 s), and the slot before that hole
/// moved from 1 s to 1.05 s, past its caller's deadline (1.02 s), which then called after it
/// (the simulator's `attempts_within_deadline`, seed 2111: 103 ms after). A slot placed
/// again starts no later than promised.
#[tokio::test(start_paused = true)]
async fn a_slot_placed_again_never_starts_later_than_promised() {
    let policy = Policy::builder()
        .rate(10, 10 * SEC, 1)
        .rate_learn()
        .build()
        .unwrap();
    let start = Instant::now();
    let under = |deadline| {
        let mut tuning = policy.tuning();
        tuning.deadline = deadline;
        policy.set_tuning(tuning).unwrap();
        policy.execute::<TestError>()
    };
    let (first, second, third, fourth) = (
        under(None),
        under(Some(1_020 * MS)),
        under(None),
        under(None),
    );
    let called = Mutex::new(None);
    let answered = once(first, async {
        tokio::time::sleep(500 * MS).await;
        answers(said(Some(10), 9, 10_500 * MS)).await
    });
    let promised = once(second, async {
        *called.lock().unwrap() = Some(start.elapsed());
        Ok(())
    });
    let given_up = tokio::time::timeout(100 * MS, once(third, async { Ok(()) }));
    let last = once(fourth, async { Ok(()) });
    let (answered, promised, given_up, last) = futures::join!(answered, promised, given_up, last);
    assert_eq!((answered, promised, last), (Ok(()), Ok(()), Ok(())));
    assert!(given_up.is_err(), "the third gave up waiting");
    assert_eq!(
        *called.lock().unwrap(),
        Some(SEC),
        "the second called at the slot it was promised, within its deadline (1.02 s)"
    );
}

/// A caller of a learning gate looks at its slot again every second, and started at the first
/// look its learning gate allowed, though its other gate's slot was still nine seconds away
/// (the simulator's `gate_ceiling_per_instance`, seed 1172: 2 776 tokens where 2 274 may).
#[tokio::test(start_paused = true)]
async fn a_learning_gates_look_again_waits_for_the_other_gates_slot() {
    let policy = Policy::builder()
        .rate(10, SEC, 10)
        .rate_learn()
        .token_rate(1000, 10 * SEC, 1000)
        .build()
        .unwrap();
    let start = Instant::now();
    let mut called = Vec::new();
    for _ in 0..2 {
        let mut execution = policy.execute::<TestError>();
        execution.set_cost(1000);
        let next = execution.attempt(async { Ok::<_, TestError>(()) }).await;
        assert!(matches!(next, resil_runtime::Next::Done(_)));
        called.push(start.elapsed());
    }
    assert_eq!(
        called,
        [Duration::ZERO, 10 * SEC],
        "the second call's tokens come back after 10 s, whatever its rate gate allows"
    );
}

/// An auto gate that knows nothing yet, its callers waiting in its room while the probe is
/// out: the next one's wait for the probe's answer was booked again at every poll, waking
/// the watchers each time, and two waiters polled by one task (a call and its hedge) woke
/// each other for ever, the clock standing still (the simulator's seed 472 never ended).
#[tokio::test(start_paused = true)]
async fn waiters_of_one_task_wait_for_the_probe_without_waking_each_other() {
    let policy = Policy::builder()
        .token_rate_learn()
        .by_priority()
        .build()
        .unwrap();
    let answer = || tokens_answer(said(Some(1000), 900, SEC));
    let probe = call_as(&policy, 0, 10, async {
        tokio::time::sleep(100 * MS).await;
        answer().await
    });
    let start = Instant::now();
    let waiting = async {
        tokio::time::sleep(MS).await;
        futures::join!(
            call_as(&policy, 1, 10, answer()),
            call_as(&policy, 2, 10, answer())
        )
    };
    let mut waiting = std::pin::pin!(waiting);
    let mut polls = 0;
    let waiting = std::future::poll_fn(|cx| {
        polls += 1;
        assert!(polls < 100, "polled {polls} times by {:?}", start.elapsed());
        std::future::Future::poll(waiting.as_mut(), cx)
    });
    futures::join!(probe, waiting);
    // The room's next looks again every 20 ms, from 1 ms.
    assert_eq!(
        start.elapsed(),
        101 * MS,
        "both went at the next look after the answer"
    );
}
