//! `priority = ARG` with gates that learn the provider's limits (`rate = "auto"`,
//! `learn = true`, `token_rate = "auto"`): the waiting room serves the most urgent caller
//! first there too, at the pace and within the limits the answers state. Paused clock.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority, ProviderLimits, Quota};
use support::{at, ApiError};
use tokio::time::Instant;

type Starts = support::Starts<Priority>;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// A provider allowing `limit` requests (or tokens) per fixed window of a second from its
/// start, stating what is left on every answer; counts the units it saw past its limit.
struct Provider {
    limit: u64,
    tokens: bool,
    origin: Instant,
    window: Mutex<(u128, u64)>,
    over: AtomicU64,
}

impl Provider {
    fn new(limit: u64, tokens: bool) -> Self {
        Provider {
            limit,
            tokens,
            origin: Instant::now(),
            window: Mutex::new((0, 0)),
            over: AtomicU64::new(0),
        }
    }

    /// A call of `units` comes: its answer says what is left until the window's end.
    fn answer(&self, units: u64) {
        let elapsed = self.origin.elapsed();
        let index = elapsed.as_nanos() / 1_000_000_000;
        let reset = Duration::from_secs(1) - Duration::from_nanos(elapsed.subsec_nanos().into());
        let remaining = {
            let mut window = self.window.lock().unwrap();
            if window.0 != index {
                *window = (index, 0);
            }
            window.1 += units;
            let over = window.1.saturating_sub(self.limit).min(units);
            self.over.fetch_add(over, Ordering::Relaxed);
            self.limit.saturating_sub(window.1)
        };
        let quota = Some(Quota {
            limit: Some(self.limit),
            remaining,
            reset,
            window: None,
        });
        resil::operation::report_limits(match self.tokens {
            true => ProviderLimits {
                requests: None,
                tokens: quota,
            },
            false => ProviderLimits {
                requests: quota,
                tokens: None,
            },
        });
    }

    fn over(&self) -> u64 {
        self.over.load(Ordering::Relaxed)
    }
}

/// Each test has its own function, and so its own gate: tests run side by side.
macro_rules! learning {
    ($name:ident, $($keys:tt)*) => {
        #[resilient($($keys)*)]
        async fn $name(class: Priority, provider: &Provider, starts: &Starts) -> Result<(), ApiError> {
            starts.add(class);
            provider.answer(1);
            Ok(())
        }
    };
}

learning!(auto_in_turn, rate = "auto", priority = class);
learning!(auto_in_arrival_order, rate = "auto");
learning!(auto_probing, rate = "auto", priority = class);
learning!(
    declared_in_turn,
    rate = "10/s",
    learn = true,
    priority = class
);

/// 40 batch calls queued at a gate whose provider allows 10 a second, and a critical call at
/// 1.05 s: when the critical call started, and how many started before it, checking that the
/// provider never saw more than its limit. `call` is the function under test, its calls
/// recorded in `starts`.
async fn behind_a_batch_job<F, Fut>(
    provider: &Provider,
    starts: &Starts,
    call: F,
) -> (Duration, usize)
where
    F: Fn(Priority) -> Fut,
    Fut: std::future::Future<Output = Result<(), ApiError>>,
{
    let batch = join_all((0..40).map(|_| call(Priority::Batch)));
    let arrives = MS(1050);
    let critical = at(arrives, || call(Priority::Critical));
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(provider.over(), 0, "past the provider's limit");
    assert_eq!(starts.all().len(), 41);
    let before = starts
        .labels()
        .iter()
        .position(|c| *c == Priority::Critical);
    (starts.of(&Priority::Critical)[0], before.unwrap())
}

/// What `behind_a_batch_job` measures for `function`, with a provider of its own.
macro_rules! critical_start {
    ($function:ident) => {{
        let (provider, starts) = (Provider::new(10, false), Starts::new());
        behind_a_batch_job(&provider, &starts, |class| {
            $function(class, &provider, &starts)
        })
        .await
    }};
}

/// An auto gate hands out at once what an answer says is left before the reset, as the
/// provider would: the 10 of each second go at its start, so the critical call, come at
/// 1.05 s, cannot start before 2 s. It is served first then, not after the batch job's 30.
#[tokio::test(start_paused = true)]
async fn an_auto_gates_critical_call_passes_a_queued_batch_job() {
    let in_turn = critical_start!(auto_in_turn);
    assert_eq!(in_turn, (MS(2000), 20), "first of the next window");
    let arrival_order = critical_start!(auto_in_arrival_order);
    assert_eq!(arrival_order, (MS(4000), 40), "behind the batch job");
}

/// A declared gate that learns paces its calls at the declared rate (the provider states as
/// much): the critical call takes the next slot.
#[tokio::test(start_paused = true)]
async fn a_declared_gate_that_learns_serves_a_critical_call_first() {
    let waited = critical_start!(declared_in_turn).0 - MS(1050);
    assert!(waited <= MS(100), "the critical call waited {waited:?}");
}

/// An auto gate that knows nothing sends one call (the probe) and holds the others until its
/// answer: here "limit 2, 1 left until the reset at 1 s", so one more goes at once and the
/// rest wait for the reset. A critical call that came meanwhile is the first after it.
#[tokio::test(start_paused = true)]
async fn after_the_probe_the_most_urgent_waiter_goes_first() {
    let (provider, starts) = (Provider::new(2, false), Starts::new());
    let batch = join_all((0..5).map(|_| auto_probing(Priority::Batch, &provider, &starts)));
    let critical = at(MS(500), || {
        auto_probing(Priority::Critical, &provider, &starts)
    });
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(provider.over(), 0, "past the provider's limit");
    let batch = starts.of(&Priority::Batch);
    let critical = starts.of(&Priority::Critical)[0];
    // The probe's answer comes in the same poll: the one left goes at once.
    assert_eq!(&batch[..2], [MS(0), MS(0)], "the probe, then the one left");
    assert_eq!(critical, MS(1000), "at the reset");
    assert_eq!(&batch[2..], [MS(1000), MS(2000), MS(2000)]);
    assert_eq!(
        starts.labels()[2],
        Priority::Critical,
        "first after the reset"
    );
}

type Costs = support::Starts<(Priority, u64)>;

#[resilient(token_rate = "auto", rate_cost = cost, priority = class)]
async fn tokens_learnt(
    class: Priority,
    cost: u64,
    provider: &Provider,
    starts: &Costs,
) -> Result<(), ApiError> {
    starts.add((class, cost));
    provider.answer(cost);
    Ok(())
}

/// 20 batch calls of 500 tokens at a token gate that learns a provider allowing 1 000 a
/// second, and a critical call of 10 tokens at 1.05 s: it starts with the next units free
/// (the next second's: the auto gate handed out that second's at its start), not behind the
/// batch job's 9 s of tokens.
#[tokio::test(start_paused = true)]
async fn a_learnt_token_gate_serves_a_critical_call_before_a_batch_jobs_tokens() {
    let (provider, starts) = (Provider::new(1000, true), Costs::new());
    let batch = join_all((0..20).map(|_| tokens_learnt(Priority::Batch, 500, &provider, &starts)));
    let arrives = MS(1050);
    let critical = at(arrives, || {
        tokens_learnt(Priority::Critical, 10, &provider, &starts)
    });
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    assert_eq!(provider.over(), 0, "past the provider's limit");
    assert_eq!(starts.of(&(Priority::Critical, 10)), [MS(2000)]);
}

#[resilient(rate = "2/s", token_rate = "auto", rate_cost = 10, priority = class)]
async fn probed_by_tokens(
    class: Priority,
    probe: bool,
    provider: &Provider,
    starts: &Starts,
) -> Result<(), ApiError> {
    starts.add(class);
    if probe {
        tokio::time::sleep(MS(1500)).await;
    }
    provider.answer(10);
    Ok(())
}

/// Callers the request gate's room served while the token gate that learns waited for its
/// probe's answer held their request slots, and all started at the answer: three in a
/// moment on a `2/s` gate, whose ceiling is two in any second (the simulator's seed 28895).
/// A call whose units come later takes its request slot when they come.
#[tokio::test(start_paused = true)]
async fn calls_waiting_for_their_units_take_their_request_slots_when_the_units_come() {
    let (provider, starts) = (Provider::new(100_000, true), Starts::new());
    let probe = probed_by_tokens(Priority::Default, true, &provider, &starts);
    let waiting = join_all((1..=3).map(|n| {
        at(MS(100 * n), || {
            probed_by_tokens(Priority::Default, false, &provider, &starts)
        })
    }));
    let (probe, waiting) = tokio::join!(probe, waiting);
    assert!(probe.is_ok() && waiting.iter().all(Result::is_ok));
    starts.keep_rate(2, Duration::from_secs(1));
    assert_eq!(starts.all(), [MS(0), MS(1500), MS(2000), MS(2500)]);
}
