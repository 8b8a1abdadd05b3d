//! The settings a builder is given: drawn from the valid space, its edges included (1 ns,
//! `Duration::MAX`, `u32::MAX` retries, `u64::MAX` counts, a timeout equal to the deadline),
//! and now and then with one rule broken, which the builder must refuse.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use resil_runtime::{Backoff, Breaker, BreakerConfig, ConfigError, Jitter, Policy, PolicyBuilder};

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) retry: u32,
    pub(crate) retry_after_max: Duration,
    pub(crate) backoff: Option<(Duration, Duration)>,
    pub(crate) jitter: Jitter,
    pub(crate) breaker: Option<(u32, Duration)>,
    pub(crate) bulkhead: Option<usize>,
    pub(crate) queue: Option<usize>,
    pub(crate) budget: Option<(f64, f64)>,
    pub(crate) rate: Option<(u64, Duration, u64)>,
    pub(crate) token_rate: Option<(u64, Duration, u64)>,
    pub(crate) cost: u64,
    pub(crate) idle: Option<Duration>,
    /// What the provider asks to wait, in the answers that ask.
    pub(crate) answer_wait: Duration,
    /// The rule these settings break, if one is.
    pub(crate) broken: Option<Broken>,
}

/// One rule broken on purpose.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Broken {
    ZeroTimeout,
    ZeroIdle,
    TimeoutAboveDeadline,
    ZeroBackoffBase,
    BackoffBaseAboveCap,
    ZeroBreakerThreshold,
    ZeroBreakerCooldown,
    ZeroBulkhead,
    BudgetNotANumber,
    NegativeBudget,
    ZeroRate,
    ZeroTokenPeriod,
    RetriesPastDeadline,
}

impl Broken {
    fn apply(self, settings: &mut Settings) {
        let second = Duration::from_secs(1);
        match self {
            Broken::ZeroTimeout => settings.timeout = Some(Duration::ZERO),
            Broken::ZeroIdle => settings.idle = Some(Duration::ZERO),
            // One nanosecond over: the edge.
            Broken::TimeoutAboveDeadline => {
                settings.deadline = Some(second);
                settings.timeout = Some(second + Duration::from_nanos(1));
            }
            Broken::ZeroBackoffBase => settings.backoff = Some((Duration::ZERO, second)),
            Broken::BackoffBaseAboveCap => {
                settings.backoff = Some((second + Duration::from_nanos(1), second));
            }
            Broken::ZeroBreakerThreshold => settings.breaker = Some((0, second)),
            Broken::ZeroBreakerCooldown => settings.breaker = Some((3, Duration::ZERO)),
            Broken::ZeroBulkhead => settings.bulkhead = Some(0),
            Broken::BudgetNotANumber => settings.budget = Some((f64::NAN, f64::INFINITY)),
            Broken::NegativeBudget => settings.budget = Some((0.2, -1.0)),
            Broken::ZeroRate => settings.rate = Some((0, second, 1)),
            Broken::ZeroTokenPeriod => settings.token_rate = Some((10, Duration::ZERO, 10)),
            // Waits no jitter can shorten that end exactly at the deadline.
            Broken::RetriesPastDeadline => {
                settings.retry = settings.retry.clamp(1, 4);
                settings.backoff = Some((second, second));
                settings.jitter = Jitter::None;
                settings.timeout = None;
                settings.deadline = Some(second * settings.retry);
            }
        }
    }
}

/// A duration the rules allow where a positive one is needed.
pub(crate) fn positive() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => Just(Duration::from_nanos(1)),
        1 => Just(Duration::MAX),
        6 => (1u64..10_000).prop_map(Duration::from_millis),
    ]
}

/// Any duration: zero, the positive ones, and any number of seconds up to `u64::MAX`.
pub(crate) fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        1 => Just(Duration::ZERO),
        4 => positive(),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

pub(crate) fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        Just(Jitter::None)
    ]
}

fn count() -> impl Strategy<Value = u64> {
    prop_oneof![Just(1u64), Just(u64::MAX), 1u64..100]
}

fn share() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), Just(f64::MAX), 0.0..5.0f64]
}

fn broken() -> impl Strategy<Value = Broken> {
    prop_oneof![
        Just(Broken::ZeroTimeout),
        Just(Broken::ZeroIdle),
        Just(Broken::TimeoutAboveDeadline),
        Just(Broken::ZeroBackoffBase),
        Just(Broken::BackoffBaseAboveCap),
        Just(Broken::ZeroBreakerThreshold),
        Just(Broken::ZeroBreakerCooldown),
        Just(Broken::ZeroBulkhead),
        Just(Broken::BudgetNotANumber),
        Just(Broken::NegativeBudget),
        Just(Broken::ZeroRate),
        Just(Broken::ZeroTokenPeriod),
        Just(Broken::RetriesPastDeadline),
    ]
}

/// Valid settings, then, about one time in seven, one rule broken.
pub(crate) fn settings() -> impl Strategy<Value = Settings> {
    (
        (
            proptest::option::of(positive()),
            proptest::option::of(positive()),
            prop_oneof![Just(0u32), Just(u32::MAX), 1u32..5],
            any_duration(),
            proptest::option::of((positive(), positive())),
            jitter(),
        ),
        (
            proptest::option::of((prop_oneof![Just(1u32), Just(u32::MAX), 2u32..6], positive())),
            proptest::option::of(prop_oneof![Just(1usize), Just(usize::MAX), 2usize..5]),
            proptest::option::of(prop_oneof![Just(0usize), Just(usize::MAX), 1usize..4]),
            proptest::option::of((share(), share())),
        ),
        (
            proptest::option::of((count(), positive(), count())),
            proptest::option::of((count(), positive(), count())),
            prop_oneof![Just(0u64), Just(u64::MAX), 1u64..100],
            proptest::option::of(positive()),
            any_duration(),
            proptest::option::weighted(1.0 / 7.0, broken()),
        ),
    )
        .prop_map(
            |(
                (timeout, deadline, retry, retry_after_max, backoff, jitter),
                (breaker, bulkhead, queue, budget),
                (rate, token_rate, cost, idle, answer_wait, broken),
            )| {
                let mut settings = Settings {
                    timeout,
                    deadline,
                    retry,
                    retry_after_max,
                    backoff: backoff.map(|(a, b)| (a.min(b), a.max(b))),
                    jitter,
                    breaker,
                    bulkhead,
                    queue,
                    budget,
                    rate,
                    token_rate,
                    cost,
                    idle,
                    answer_wait,
                    broken,
                };
                settings.within_the_deadline();
                if let Some(broken) = broken {
                    broken.apply(&mut settings);
                }
                settings
            },
        )
}

impl Settings {
    /// The timeout within the deadline (the two swapped when drawn the other way round), and
    /// the waits no jitter can shorten ending before it: the deadline grows by them, or, when
    /// they would make it overflow, the jitter becomes full (which can wait nothing).
    fn within_the_deadline(&mut self) {
        let Some(deadline) = self.deadline else {
            return;
        };
        if let Some(timeout) = self.timeout.filter(|&timeout| timeout > deadline) {
            (self.timeout, self.deadline) = (Some(deadline), Some(timeout));
        }
        let deadline = self.deadline.unwrap();
        let backoff = (self.backoff).unwrap_or_else(|| {
            let default = Backoff::default();
            (default.base(), default.cap())
        });
        let waits = resil_spec::shortest_waits(self.retry, backoff, self.jitter);
        if self.retry > 0 && waits >= deadline {
            match deadline.checked_add(waits) {
                Some(longer) => self.deadline = Some(longer),
                None => self.jitter = Jitter::Full,
            }
        }
    }
}

/// A builder with these settings (the seed fixed, so waits can be worked out), or the
/// breaker's own refusal.
pub(crate) fn builder(settings: &Settings) -> Result<PolicyBuilder, ConfigError> {
    let mut builder = Policy::builder()
        .retry(settings.retry)
        .retry_after_max(settings.retry_after_max)
        .jitter(settings.jitter)
        .seed(crate::rules::SEED);
    if let Some(timeout) = settings.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(deadline) = settings.deadline {
        builder = builder.deadline(deadline);
    }
    if let Some((base, cap)) = settings.backoff {
        builder = builder.backoff(base, cap);
    }
    if let Some((threshold, cooldown)) = settings.breaker {
        let config = BreakerConfig::new(threshold, cooldown)?;
        builder = builder.breaker(Arc::new(Breaker::new("bad-input", config)));
    }
    if let Some(bulkhead) = settings.bulkhead {
        builder = builder.bulkhead(bulkhead);
    }
    if let Some(queue) = settings.queue {
        builder = builder.bulkhead_queue(queue);
    }
    if let Some((ratio, min)) = settings.budget {
        builder = builder.retry_budget(ratio, min);
    }
    if let Some((count, period, burst)) = settings.rate {
        builder = builder.rate(count, period, burst);
    }
    if let Some((count, period, burst)) = settings.token_rate {
        builder = builder.token_rate(count, period, burst);
    }
    if let Some(idle) = settings.idle {
        builder = builder.idle_timeout(idle);
    }
    Ok(builder)
}

pub(crate) fn build(settings: &Settings) -> Result<Policy, ConfigError> {
    builder(settings)?.build()
}

/// Most cases run a policy: the property checks that valid settings build and broken ones do
/// not, and this, that the valid ones are most of what is drawn.
#[test]
fn most_drawn_settings_build_and_some_are_refused() {
    let mut runner = TestRunner::deterministic();
    let drawn = 1_000;
    let built = (0..drawn)
        .filter(|_| build(&settings().new_tree(&mut runner).unwrap().current()).is_ok())
        .count();
    println!("{built} of {drawn} drawn settings built");
    assert!(
        (700..=950).contains(&built),
        "{built} of {drawn} drawn settings built: most should, and some should be refused"
    );
}
