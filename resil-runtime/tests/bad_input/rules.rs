//! What the rules say one operation comes to, worked out by a plain loop over the runtime's
//! public parts (its rate gates, retry budget, backoff and the generator the policy's seed
//! starts): DESIGN's "Semantics, in order", for a fresh policy that nobody else calls.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use resil_runtime::events::{Event, Listener};
use resil_runtime::{Backoff, Jitter, RateGate, Rejected, RetryBudget, Transient};
use tokio::time::{sleep_until, Instant};

use crate::common::TestError;
use crate::settings::Settings;

/// The seed of every policy built here.
pub(crate) const SEED: u64 = 7;

/// Calls a body answers as its scenario says; later ones fail with a permanent error, so that
/// an operation allowed to retry forever (`u32::MAX` retries, waits of nothing) still ends.
pub(crate) const CALLS: u32 = 8;

/// The runtime's "practically never": no instant is computed further away.
const NEVER: Duration = Duration::from_secs(86_400 * 365 * 30);
/// A slot's wait ends at least this long before the deadline (see `start_by` in the runtime).
const MILLI: Duration = Duration::from_millis(1);

/// `at + after`, as the runtime computes instants (saturating at `NEVER`).
pub(crate) fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after.min(NEVER))
        .or_else(|| at.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(at)
}

/// What a provider does, call after call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Body {
    /// A 429 asking to wait.
    Throttled(Duration),
    /// A transient failure asking to wait.
    RetryAfter(Duration),
    /// No answer, ever.
    Hang,
}

impl Body {
    /// What call `n` (from 1) answers; `None`: nothing, ever.
    pub(crate) fn answer(self, n: u32) -> Option<TestError> {
        if n > CALLS {
            return Some(TestError::BadRequest);
        }
        match self {
            Body::Throttled(wait) => Some(TestError::Throttled(wait)),
            Body::RetryAfter(wait) => Some(TestError::RetryAfter(wait)),
            Body::Hang => None,
        }
    }
}

/// How far an operation got: its calls, the waits it announced before its retries.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    pub(crate) calls: u32,
    pub(crate) waits: Vec<Duration>,
}

/// The waits a policy announces before its retries.
#[derive(Debug, Default)]
pub(crate) struct Waits(Mutex<Vec<Duration>>);

impl Waits {
    pub(crate) fn taken(&self) -> Vec<Duration> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

impl Listener for Waits {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::Waiting { wait, .. } = event {
            self.0.lock().unwrap().push(*wait);
        }
    }
}

/// The operation `body` makes under a fresh policy of `settings`, by the rules; `progress`
/// keeps count, also when the caller stops waiting for the result.
pub(crate) async fn by_the_rules(
    settings: &Settings,
    body: Body,
    progress: &mut Progress,
) -> Result<u32, TestError> {
    let deadline = settings
        .deadline
        .map(|deadline| later(Instant::now(), deadline));
    let gates: Vec<RateGate> = [settings.rate, settings.token_rate]
        .into_iter()
        .flatten()
        .map(|(count, period, burst)| RateGate::new(count, period, burst).unwrap())
        .collect();
    let budget = (settings.budget).map(|(ratio, min)| RetryBudget::new(ratio, min).unwrap());
    let backoff = (settings.backoff)
        .map_or_else(Backoff::default, |(base, cap)| {
            Backoff::new(base, cap).unwrap()
        })
        .with_jitter(settings.jitter);
    let mut rng = SmallRng::seed_from_u64(SEED);
    // Consecutive failures the breaker counted: no call ends well here, so none resets them.
    let mut failures = 0;
    let mut last_error = None;
    loop {
        // A passed deadline stops an attempt before anything else. (A wait that fits before
        // the deadline may still end after it: timers fire on whole milliseconds.)
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Err(TestError::Rejected(Rejected::DeadlineExceeded));
        }
        // A slot in each gate, whose wait ends a millisecond before the deadline; a retry
        // refused one ends the operation with what the provider said last. (A first attempt
        // always has its slot at once.)
        let start_by = deadline.map(|deadline| deadline.checked_sub(MILLI).unwrap_or(deadline));
        let mut slot = Duration::ZERO;
        for gate in &gates {
            match gate.reserve(1, start_by) {
                Ok(wait) => slot = slot.max(wait),
                Err(refused) => return Err(last_error.unwrap_or(TestError::Rejected(refused))),
            }
        }
        sleep_until(later(Instant::now(), slot)).await;
        progress.calls += 1;
        if progress.calls == 1 {
            budget.iter().for_each(RetryBudget::record_first_attempt);
        }
        let error = match body.answer(progress.calls) {
            Some(error) => error,
            None => TestError::Rejected(hang(settings.timeout, deadline).await),
        };
        // Every transient failure but a throttle counts toward opening the breaker (an
        // attempt timeout too); a throttle holds the gates for its wait instead.
        if error.is_transient() && !error.is_throttle() {
            failures += 1;
        }
        if error.is_throttle() {
            let wait = error.retry_after().unwrap().min(settings.retry_after_max);
            for gate in &gates {
                gate.slow_down();
                gate.hold(wait);
            }
        }
        // A permanent error, or the deadline's cut, ends the operation.
        if !error.is_transient() {
            return Err(error);
        }
        let asked = error.retry_after();
        let retries_left = progress.calls <= settings.retry;
        let breaker_closed = (settings.breaker).is_none_or(|(threshold, _)| failures < threshold);
        let asked_in_reason = asked.is_none_or(|asked| asked <= settings.retry_after_max);
        if !(retries_left && breaker_closed && asked_in_reason) {
            return Err(error);
        }
        let previous = progress
            .waits
            .last()
            .copied()
            .filter(|wait| !wait.is_zero());
        let drawn = backoff.delay(progress.calls - 1, previous, &mut rng);
        // The Retry-After is a floor under the jitter (without jitter, the longer of the two).
        let wait = match (asked, settings.jitter) {
            (None, _) => drawn,
            (Some(asked), Jitter::None) => drawn.max(asked),
            (Some(asked), _) => asked.saturating_add(drawn),
        };
        // No wait is started that cannot end before the deadline.
        let fits = deadline.is_none_or(|deadline| later(Instant::now(), wait) < deadline);
        if !fits || budget.as_ref().is_some_and(|budget| !budget.try_withdraw()) {
            return Err(error);
        }
        progress.waits.push(wait);
        last_error = Some(error);
        sleep_until(later(Instant::now(), wait)).await;
    }
}

/// A call that never answers, cut by its timeout or by the deadline, whichever comes first
/// (the deadline, when they come together).
async fn hang(timeout: Option<Duration>, deadline: Option<Instant>) -> Rejected {
    let started = Instant::now();
    let by_timeout = timeout.map(|after| (later(started, after), after));
    match (by_timeout, deadline) {
        (Some((at, after)), Some(deadline)) if at < deadline => {
            sleep_until(at).await;
            Rejected::Timeout { after }
        }
        (_, Some(deadline)) => {
            sleep_until(deadline).await;
            Rejected::DeadlineExceeded
        }
        (Some((at, after)), None) => {
            sleep_until(at).await;
            Rejected::Timeout { after }
        }
        (None, None) => std::future::pending().await,
    }
}
