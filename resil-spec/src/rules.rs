//! The rules a policy's settings follow, each with the one sentence that says the fix. The
//! `#[resilient]` macro reports a broken rule at the offending token at compile time; the
//! runtime's builders return the same [`Violation`] as their `ConfigError`.
//!
//! ```
//! use resil_spec::rules::{self, Violation};
//!
//! assert_eq!(rules::bulkhead(0), Err(Violation::ZeroBulkhead));
//! assert!(rules::bulkhead(8).is_ok());
//! assert!(Violation::ZeroBulkhead.to_string().contains("such as 8"));
//! ```

use std::fmt;
use std::time::Duration;

use crate::duration::human;

mod breaker;

pub use breaker::{
    breaker_kind, breaker_window, min_calls_within_rate, shared_window, MAX_TIME_WINDOW, MAX_WINDOW,
};

/// A setting that cannot work as given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// A duration that must be positive was zero.
    ZeroDuration {
        /// The setting.
        key: &'static str,
    },
    /// The backoff's base is larger than its cap.
    BackoffBaseAboveCap {
        /// The first wait.
        base: Duration,
        /// The longest wait.
        cap: Duration,
    },
    /// A bulkhead of zero lets nothing through.
    ZeroBulkhead,
    /// An adaptive bulkhead's bounds: a minimum of 0, or above the maximum.
    AdaptiveBulkhead {
        /// The least the limit may fall to.
        min: usize,
        /// The most the limit may grow to.
        max: usize,
    },
    /// A keyed registry bounded to zero keys could hold no breaker at all.
    ZeroMaxKeys,
    /// A breaker that opens after zero failures is always open.
    ZeroBreakerThreshold,
    /// The per-attempt timeout is longer than the whole operation's deadline.
    TimeoutAboveDeadline {
        /// Limit of one attempt.
        timeout: Duration,
        /// Limit of the whole operation.
        deadline: Duration,
    },
    /// A retry budget's share or minimum is negative or not a number.
    InvalidRetryBudget,
    /// A hedge that could never start, or more than three at once.
    Hedge {
        /// Hedges at most (`N` of `"N after DELAY"`).
        count: u32,
        /// How long an attempt runs before the next hedge starts.
        delay: Duration,
        /// The limit of one attempt (`timeout`, or `first_item_timeout` for a stream).
        timeout: Option<Duration>,
        /// Extra attempts after the first: hedges draw from them.
        retry: u32,
    },
    /// A rate gate that lets nothing through: a count or burst of zero.
    ZeroRate {
        /// The setting (`rate`, `token_rate`).
        key: &'static str,
    },
    /// A batch share outside 1 to 99 %.
    BatchShare {
        /// The share given, in percent.
        percent: u8,
    },
    /// A batch share without a declared rate of all calls to share.
    BatchShareWithoutRate,
    /// A batch share of the token gate without a declared token gate of all calls that
    /// orders its waiters (one that neither learns nor is shared) to share.
    BatchShareWithoutTokenGate,
    /// Waiters served by priority (or fairly) at a shared gate that learns and takes the turn
    /// to ask the store (the rate gate, or the token gate with no rate gate beside it), which
    /// serves them in arrival order for now.
    OrderedLearningGate,
    /// The waits alone before the last retry outlast the deadline: that retry can never be made.
    RetriesPastDeadline {
        /// Extra attempts after the first.
        retry: u32,
        /// The least the waits add up to.
        waits: Duration,
        /// Limit of the whole operation.
        deadline: Duration,
    },
    /// A failure-rate or slow-call breaker's share is not a percentage that can trip.
    BreakerRate {
        /// The share given, in percent.
        percent: u32,
    },
    /// A failure-rate or slow-call breaker's window cannot hold its minimum of calls.
    BreakerWindow {
        /// Calls in the window.
        window: u32,
        /// Calls counted before it may trip.
        min_calls: u32,
    },
    /// A failure-rate or slow-call breaker's time window is under a second or over a day.
    BreakerTimeWindow {
        /// The window given.
        window: Duration,
    },
    /// A breaker's time window cannot see its minimum of calls at the declared rate: it
    /// could never open.
    MinCallsPastRate {
        /// Calls counted before it may trip.
        min_calls: u32,
        /// The breaker's time window.
        window: Duration,
        /// The most calls the rate gate lets through in that window.
        calls: u64,
    },
    /// A shared failure-rate or slow-call breaker counts its window in calls: each instance
    /// would judge only its own, so the window must be in time to be summed over instances.
    SharedCountWindow {
        /// Calls in the window.
        window: u32,
    },
    /// A setting is made per key, but the policy does not have it.
    PerKeyWithout {
        /// The setting (`bulkhead`, `rate`, `token_rate`).
        key: &'static str,
    },
    /// A policy is keyed, but nothing is kept per key.
    KeyScopesNothing {
        /// What the keys are.
        label: String,
    },
    /// A policy is shared through Redis, but has nothing to share.
    SharesNothing,
    /// A `shared_timeout` so long that a slow Redis would hold every call.
    SharedTimeout {
        /// The timeout given.
        timeout: Duration,
    },
    /// A tuning set by hand breaks a rule once the configuration's overrides of its policy are
    /// written over it.
    Overridden {
        /// The rule the overridden tuning breaks.
        rule: Box<Violation>,
    },
    /// A named breaker is already in use with other settings.
    BreakerConflict {
        /// The breaker's name.
        name: String,
        /// Threshold of the breaker in use.
        existing_threshold: u32,
        /// Cooldown of the breaker in use.
        existing_cooldown: Duration,
        /// Threshold this site asked for.
        threshold: u32,
        /// Cooldown this site asked for.
        cooldown: Duration,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::ZeroDuration { key } => write!(
                f,
                "`{key}` is zero: give it a positive duration, such as \"300ms\", or leave `{key}` out"
            ),
            Violation::BackoffBaseAboveCap { base, cap } => write!(
                f,
                "the backoff's base {} is larger than its cap {}: write \"base..cap\" with base ≤ cap, such as \"300ms..8s\"",
                human(*base),
                human(*cap)
            ),
            Violation::Hedge {
                count,
                delay,
                timeout,
                retry,
            } => {
                if !(1..=3).contains(count) {
                    write!(f, "a hedge starts 1 to 3 more attempts, not {count}: write `hedge = \"1 after 800ms\"`")
                } else if delay.is_zero() {
                    f.write_str("a hedge after 0 would race every call from its start: give the time an attempt runs alone, such as `hedge = \"1 after 800ms\"`")
                } else if *retry == 0 {
                    f.write_str("hedges are attempts drawn from `retry`, and this function makes none: add `retry = 2` (or more), or remove `hedge`")
                } else {
                    let timeout = timeout.map(human).unwrap_or_default();
                    write!(f, "a hedge after {} would start once the attempt's limit ({timeout}) has cut it: make the delay shorter than the limit, such as a p95 of the time to the answer or first token", human(*delay))
                }
            }
            Violation::ZeroBulkhead => f.write_str(
                "a bulkhead of 0 would reject every call: give the number of calls allowed in flight at once, such as 8",
            ),
            Violation::AdaptiveBulkhead { min: 0, .. } => f.write_str(
                "an adaptive bulkhead whose limit may fall to 0 could stop letting calls through for good: start its range at 1 or more, such as `\"adaptive 4..64\"`",
            ),
            Violation::AdaptiveBulkhead { min, max } => write!(
                f,
                "an adaptive bulkhead's range {min}..{max} is empty: write the least limit first, then the most, such as `\"adaptive {max}..{min}\"`"
            ),
            Violation::ZeroMaxKeys => f.write_str(
                "`max_keys` of 0 leaves no room for any key: give the number of keys to remember, such as 10000",
            ),
            Violation::ZeroBreakerThreshold => f.write_str(
                "a breaker threshold of 0 would open the breaker before any failure: give the number of consecutive failures that open it, such as 5",
            ),
            Violation::TimeoutAboveDeadline { timeout, deadline } => write!(
                f,
                "timeout {} is longer than deadline {}: the deadline would cut every attempt first; make the timeout shorter than the deadline",
                human(*timeout),
                human(*deadline)
            ),
            Violation::ZeroRate { key } => write!(
                f,
                "`{key}` lets nothing through with a count or burst of 0: give the number allowed per period, such as \"60/min\" or \"10/s, burst 20\""
            ),
            Violation::BatchShare { percent } => write!(
                f,
                "a batch share of {percent} % leaves batch calls nothing or everything: give a share from 1 % to 99 %, such as `rate = \"500/min, batch 80%\"`"
            ),
            Violation::OrderedLearningGate => f.write_str(
                "a shared gate that learns the provider's limits (`learn`, `auto`) and asks the store for its callers in turn (the rate gate, or the token gate with no rate gate beside it) serves its waiters in arrival order: ordering them by priority or in turn across `fair` values is not implemented for it yet; declare that gate without learning, do not share it, or serve in arrival order",
            ),
            Violation::BatchShareWithoutRate => f.write_str(
                "a batch share is a share of the declared rate gate of all calls, but there is none: declare `rate(count, period, burst)` without learning (a learnt rate's capacity is the provider's, which no declared figure states, and a gate per key serves its waiters in arrival order)",
            ),
            Violation::BatchShareWithoutTokenGate => f.write_str(
                "a batch share of the token gate is a share of the declared token gate of all calls, but there is none that serves its waiters in turn: declare `token_rate(count, period, burst)`, neither learnt, shared nor per key (those serve their waiters in arrival order, or per key), or remove the share",
            ),
            Violation::InvalidRetryBudget => f.write_str(
                "a retry budget needs a share ≥ 0, such as \"20%\", and a minimum ≥ 0 retries per second, such as \"20%, min 10/s\"",
            ),
            Violation::RetriesPastDeadline {
                retry,
                waits,
                deadline,
            } => write!(
                f,
                "{retry} retries wait at least {} in all, and the deadline is {}: the last retry could never be made; make fewer retries, shorter waits (backoff, jitter) or a longer deadline",
                human(*waits),
                human(*deadline)
            ),
            Violation::BreakerRate { percent } => write!(
                f,
                "a breaker that trips at {percent}% of calls {}: give a share from 1% to 100%, such as \"25%\"",
                if *percent == 0 { "would trip on the first call" } else { "could never trip" }
            ),
            Violation::BreakerWindow { min_calls: 0, .. } => f.write_str(
                "a breaker that may open before a single call was counted: give `breaker_min_calls` of at least 1, such as 10",
            ),
            Violation::BreakerWindow { window, min_calls } => write!(
                f,
                "a breaker judging the last {window} calls after at least {min_calls}: the window must hold 1 to {MAX_WINDOW} calls and at least the minimum, such as a window of 20 with a minimum of 10"
            ),
            Violation::BreakerTimeWindow { window } => write!(
                f,
                // `human` writes minutes at most; the limit reads better in hours.
                "a breaker judging the calls of the last {}: a time window must be from 1s to {}h, such as \"30s\"",
                human(*window),
                MAX_TIME_WINDOW.as_secs() / 3600
            ),
            Violation::MinCallsPastRate {
                min_calls,
                window,
                calls,
            } => write!(
                f,
                "the rate lets at most {calls} calls through in {}, and the breaker counts {min_calls} before it may open: it could never open; lower `breaker_min_calls` to at most {calls}, or make the window longer",
                human(*window)
            ),
            Violation::SharedCountWindow { window } => write!(
                f,
                "a shared breaker judges the calls of every instance together, in a window of time, and a window of {window} calls counts one instance's last calls: set `breaker_window` to a duration, such as `breaker_window = \"30s\"`"
            ),
            Violation::PerKeyWithout { key } => write!(
                f,
                "`{key}` is made per key, but the policy has no {key}: set it (`.{key}(…)`) or do not make it per key"
            ),
            Violation::KeyScopesNothing { label } => write!(
                f,
                "the policy is keyed by `{label}`, but nothing is per key: add `.breaker_per_key(…)`, `.bulkhead_per_key()`, `.rate_per_key()` or `.token_rate_per_key()`, or do not key it"
            ),
            Violation::SharesNothing => f.write_str(
                "`shared` keeps the breaker and rate gates in Redis, but the policy has neither: add a breaker or a rate (`breaker = \"openai\"`, `rate = \"10/s\"`), or remove `shared`",
            ),
            Violation::SharedTimeout { timeout } => write!(
                f,
                "a shared_timeout of {} would hold every call that long while Redis is slow, before deciding locally: give tens of milliseconds, at most {}, such as \"50ms\"",
                human(*timeout),
                human(MAX_SHARED_TIMEOUT)
            ),
            Violation::Overridden { rule } => write!(
                f,
                "with the configuration's overrides of this policy written over it, the tuning breaks a rule ({rule}): set one that fits them, or change the configuration"
            ),
            Violation::BreakerConflict {
                name,
                existing_threshold,
                existing_cooldown,
                threshold,
                cooldown,
            } => write!(
                f,
                "breaker `{name}` is already in use with threshold {existing_threshold} and cooldown {}; this site asks for threshold {threshold} and cooldown {}: configure every use of a named breaker alike",
                human(*existing_cooldown),
                human(*cooldown)
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// A duration that must be positive: timeouts, deadlines, cooldowns.
pub fn positive(key: &'static str, duration: Duration) -> Result<(), Violation> {
    if duration.is_zero() {
        return Err(Violation::ZeroDuration { key });
    }
    Ok(())
}

/// A hedge of `count` attempts after `delay`, under an attempt's limit of `timeout` and
/// `retry` extra attempts.
pub fn hedge(
    count: u32,
    delay: Duration,
    timeout: Option<Duration>,
    retry: u32,
) -> Result<(), Violation> {
    let violation = Violation::Hedge {
        count,
        delay,
        timeout,
        retry,
    };
    if !(1..=3).contains(&count) || delay.is_zero() || retry == 0 {
        return Err(violation);
    }
    if timeout.is_some_and(|timeout| delay >= timeout) {
        return Err(violation);
    }
    Ok(())
}

/// The backoff range `base..cap`.
pub fn backoff(base: Duration, cap: Duration) -> Result<(), Violation> {
    positive("backoff base", base)?;
    if base > cap {
        return Err(Violation::BackoffBaseAboveCap { base, cap });
    }
    Ok(())
}

/// A per-attempt timeout within the operation's deadline.
pub fn timeout_within_deadline(timeout: Duration, deadline: Duration) -> Result<(), Violation> {
    if timeout > deadline {
        return Err(Violation::TimeoutAboveDeadline { timeout, deadline });
    }
    Ok(())
}

/// The number of calls a bulkhead lets run at once.
pub fn bulkhead(limit: usize) -> Result<(), Violation> {
    if limit == 0 {
        return Err(Violation::ZeroBulkhead);
    }
    Ok(())
}

/// The bounds of an adaptive bulkhead's limit (`bulkhead = "adaptive 4..64"`): at least 1,
/// the least first.
///
/// ```
/// use resil_spec::rules::{self, Violation};
///
/// assert!(rules::adaptive_bulkhead(4, 64).is_ok());
/// assert_eq!(rules::adaptive_bulkhead(8, 4), Err(Violation::AdaptiveBulkhead { min: 8, max: 4 }));
/// ```
pub fn adaptive_bulkhead(min: usize, max: usize) -> Result<(), Violation> {
    if min == 0 || min > max {
        return Err(Violation::AdaptiveBulkhead { min, max });
    }
    Ok(())
}

/// Consecutive failures that open a breaker.
pub fn breaker_threshold(threshold: u32) -> Result<(), Violation> {
    if threshold == 0 {
        return Err(Violation::ZeroBreakerThreshold);
    }
    Ok(())
}

/// The longest `shared_timeout`: past it, failing open is no longer fast.
pub const MAX_SHARED_TIMEOUT: Duration = Duration::from_secs(1);

/// A policy declared shared has state to share: a breaker or a rate gate.
pub fn shares(breaker_or_gate: bool) -> Result<(), Violation> {
    if !breaker_or_gate {
        return Err(Violation::SharesNothing);
    }
    Ok(())
}

/// How long a call waits for Redis before the local state decides.
pub fn shared_timeout(timeout: Duration) -> Result<(), Violation> {
    positive("shared_timeout", timeout)?;
    if timeout > MAX_SHARED_TIMEOUT {
        return Err(Violation::SharedTimeout { timeout });
    }
    Ok(())
}

/// Keys a keyed breaker registry remembers.
pub fn max_keys(max_keys: usize) -> Result<(), Violation> {
    if max_keys == 0 {
        return Err(Violation::ZeroMaxKeys);
    }
    Ok(())
}

/// A retry budget: the share of first attempts retries may add, and a floor per second.
pub fn retry_budget(share: f64, min_per_sec: f64) -> Result<(), Violation> {
    let valid = |n: f64| n.is_finite() && n >= 0.0;
    if !(valid(share) && valid(min_per_sec)) {
        return Err(Violation::InvalidRetryBudget);
    }
    Ok(())
}

/// A rate gate: `count` per `period`, `burst` at once.
pub fn rate(key: &'static str, count: u64, period: Duration, burst: u64) -> Result<(), Violation> {
    positive(key, period)?;
    if count == 0 || burst == 0 {
        return Err(Violation::ZeroRate { key });
    }
    Ok(())
}

/// A shared policy that serves its waiters by priority or fairly (`ordered`) asks its store
/// in turn at one gate: the rate gate, else the token gate (`Some(learns)` for each gate
/// declared). That gate does not learn yet: its answers would move the slots granted in turn.
///
/// ```
/// use resil_spec::rules::{ordered_turn, Violation};
///
/// // A learning token gate beside a declared rate gate: the rate gate takes the turn.
/// assert!(ordered_turn(true, true, Some(false), Some(true)).is_ok());
/// assert_eq!(
///     ordered_turn(true, true, None, Some(true)),
///     Err(Violation::OrderedLearningGate)
/// );
/// ```
pub fn ordered_turn(
    ordered: bool,
    shared: bool,
    rate_learns: Option<bool>,
    tokens_learn: Option<bool>,
) -> Result<(), Violation> {
    let turn_learns = rate_learns.or(tokens_learn).unwrap_or(false);
    if ordered && shared && turn_learns {
        return Err(Violation::OrderedLearningGate);
    }
    Ok(())
}

/// A batch share (`rate = "500/min, batch 80%"`) from 1 to 99 %.
pub fn batch_share(percent: u8) -> Result<(), Violation> {
    if !(1..=99).contains(&percent) {
        return Err(Violation::BatchShare { percent });
    }
    Ok(())
}

/// A setting made per key (`bulkhead`, `rate`, `token_rate`) exists.
pub fn per_key(key: &'static str, declared: bool) -> Result<(), Violation> {
    if !declared {
        return Err(Violation::PerKeyWithout { key });
    }
    Ok(())
}

/// The waits that no jitter can shorten end before the deadline, so every retry declared can
/// be made.
pub fn retries_within_deadline(
    retry: u32,
    backoff: (Duration, Duration),
    jitter: crate::Jitter,
    deadline: Duration,
) -> Result<(), Violation> {
    let waits = crate::shortest_waits(retry, backoff, jitter);
    if retry > 0 && waits >= deadline {
        return Err(Violation::RetriesPastDeadline {
            retry,
            waits,
            deadline,
        });
    }
    Ok(())
}
