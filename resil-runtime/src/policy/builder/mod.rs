//! [`PolicyBuilder`]: settings in, a checked [`Policy`](crate::Policy) out.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use resil_spec::profiles::Profile;

use super::{ByTransient, Keyed, Unkeyed};
use crate::breaker::{Breaker, BreakerKind, KeyedBreakers};
use crate::events::{Both, Listener};
use crate::Jitter;

mod build;
mod bulkhead;
mod classify;
mod rate;
mod sharing;

use bulkhead::BulkheadSize;

/// Builds a [`Policy`](crate::Policy); [`PolicyBuilder::build`] checks that the settings can work.
///
/// Every value is accepted without a panic: durations as long as `Duration::MAX` mean
/// "practically never" (instants saturate), and settings that cannot work are refused by
/// `build` with a [`ConfigError`](crate::ConfigError) that says the fix.
///
/// ```
/// use resil_runtime::{ConfigError, Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .name("payments::charge")
///     .timeout(Duration::from_secs(5))
///     .deadline(Duration::from_secs(12))
///     .retry(2)
///     .retry_after_max(Duration::from_secs(10))
///     .backoff(Duration::from_millis(200), Duration::from_secs(2))
///     .jitter(Jitter::Equal)
///     .breaker_per_key("gateway", 5, Duration::from_secs(30))
///     .max_keys(1_000)
///     .bulkhead(16)
///     .build()?;
/// assert_eq!(policy.retries(), 2);
///
/// let too_long = Policy::builder()
///     .timeout(Duration::from_secs(20))
///     .deadline(Duration::from_secs(10))
///     .build();
/// assert!(matches!(too_long, Err(ConfigError::TimeoutAboveDeadline { .. })));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug)]
#[must_use = "call .build() to get the policy"]
pub struct PolicyBuilder<K = Unkeyed, C = ByTransient> {
    name: Option<Arc<str>>,
    timeout: Option<Duration>,
    deadline: Option<Duration>,
    idle: Option<Duration>,
    commit_hold: usize,
    hedge: Option<(u32, Duration)>,
    retry: u32,
    retry_after_max: Duration,
    backoff: Option<(Duration, Duration)>,
    jitter: Jitter,
    seed: Option<u64>,
    breaker: BreakerSpec,
    breaker_kind: BreakerKind,
    /// What the keys are, for a keyed policy.
    key: Option<Arc<str>>,
    per_key: PerKey,
    max_keys: usize,
    bulkhead: Option<BulkheadSize>,
    bulkhead_queue: usize,
    rate: Option<(u64, Duration, u64)>,
    token_rate: Option<(u64, Duration, u64)>,
    exact: Exact,
    learn: Exact,
    budget: Option<(f64, f64)>,
    independent: bool,
    /// Callers that wait are served by priority (see [`PolicyBuilder::by_priority`]).
    by_priority: bool,
    /// ... and in turn across their `fair` values (see [`PolicyBuilder::fair`]).
    fair: bool,
    /// The rate and token gates' shares for batch calls (see
    /// [`PolicyBuilder::rate_batch_share`]).
    batch_share: Shares,
    listener: Option<Arc<dyn Listener>>,
    #[cfg(feature = "shared")]
    shared: Option<crate::seams::Sharing>,
    keyed: PhantomData<fn() -> K>,
    classify: C,
}

#[derive(Debug, Default)]
enum BreakerSpec {
    #[default]
    None,
    Named(String, u32, Duration),
    PerKey(u32, Duration),
    Given(Arc<Breaker>),
}

/// Which gates' limits are the provider's exactly (see [`crate::RateGate::exact`]), or which
/// gates learn (see [`crate::RateGate::learning`]).
#[derive(Debug, Default, Clone, Copy)]
struct Exact {
    rate: bool,
    token_rate: bool,
}

/// The share of each gate batch calls may take while others come, in percent.
#[derive(Debug, Default, Clone, Copy)]
struct Shares {
    rate: Option<u8>,
    token_rate: Option<u8>,
}

/// Which of the bulkhead and gates each key has its own of.
#[derive(Debug, Default, Clone, Copy)]
struct PerKey {
    bulkhead: bool,
    rate: bool,
    token_rate: bool,
}

impl Default for PolicyBuilder {
    fn default() -> Self {
        PolicyBuilder {
            name: None,
            timeout: None,
            deadline: None,
            idle: None,
            commit_hold: resil_spec::defaults::COMMIT_HOLD,
            hedge: None,
            retry: 0,
            retry_after_max: PolicyBuilder::DEFAULT_RETRY_AFTER_MAX,
            backoff: None,
            jitter: Jitter::default(),
            seed: None,
            breaker: BreakerSpec::None,
            breaker_kind: BreakerKind::Consecutive,
            key: None,
            per_key: PerKey::default(),
            max_keys: KeyedBreakers::DEFAULT_MAX_KEYS,
            bulkhead: None,
            bulkhead_queue: 0,
            rate: None,
            token_rate: None,
            exact: Exact::default(),
            learn: Exact::default(),
            budget: None,
            independent: false,
            by_priority: false,
            fair: false,
            batch_share: Shares::default(),
            listener: None,
            #[cfg(feature = "shared")]
            shared: None,
            keyed: PhantomData,
            classify: ByTransient,
        }
    }
}

impl PolicyBuilder {
    /// The longest `Retry-After` honoured by default: one minute.
    pub const DEFAULT_RETRY_AFTER_MAX: Duration = resil_spec::defaults::RETRY_AFTER_MAX;
}

impl<K, C> PolicyBuilder<K, C> {
    /// Callers that must wait for the rate gate's slot, the token gate's units or a place in
    /// the bulkhead's queue are served by their [`Priority`](crate::Priority)
    /// (`priority = ARG`), set per call with
    /// [`Execution::set_priority`](crate::Execution::set_priority): the most urgent first,
    /// in arrival order within a class, with aging. Calls that need no wait are not ordered;
    /// a shared gate that learns is refused where its callers would ask the store in turn
    /// (the rate gate, or the token gate with no rate gate beside it:
    /// [`ConfigError::OrderedLearningGate`](crate::ConfigError::OrderedLearningGate)).
    /// For gates and bulkheads per key too, each key's waiters among themselves. A shared
    /// gate whose store answers is asked for one slot at a time, for the instance's most
    /// urgent caller, so no instance books a queue's slots at arrival (resil's guide page
    /// `priority` says what holds across instances).
    pub fn by_priority(mut self) -> Self {
        self.by_priority = true;
        self
    }

    /// Callers that must wait for a gate's slot or a place in the bulkhead's queue are
    /// served in turn across their `fair` values (`fair = ARG`), set per call with
    /// [`Execution::set_fair_key`](crate::Execution::set_fair_key): within a class (see
    /// [`by_priority`](PolicyBuilder::by_priority), which this implies), round-robin across
    /// the values that have callers waiting, in arrival order within a value. A value is
    /// held only while one of its calls waits, as a hash; past `max_keys` values waiting at
    /// once, newcomers share one more turn, the overflow's. At the token gate the values take
    /// turns by the tokens they were served, not by calls; across instances, each instance's
    /// turns.
    pub fn fair(mut self) -> Self {
        self.by_priority = true;
        self.fair = true;
        self
    }

    /// Keeps at most `max_keys` keys (default 10 000; see [`Keys`](crate::Keys)); with
    /// [`fair`](PolicyBuilder::fair), at most that many values take turns at once.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The name events carry (for `#[resilient]`, the function's path).
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Starts from a preset (see [`crate::profiles`]): its timeout, retries, backoff, jitter and
    /// longest `Retry-After`; calls after this one override them. A profile's breaker tuning
    /// (`profile.breaker_threshold`, `profile.breaker_cooldown`) is for the breaker you give.
    ///
    /// ```
    /// use resil_runtime::{profiles, Policy};
    /// use std::time::Duration;
    ///
    /// let llm = profiles::named("llm").unwrap();
    /// let policy = Policy::builder().profile(llm).retry(1).build().unwrap();
    /// assert_eq!(policy.retries(), 1);
    /// assert_eq!(policy.worst_case(), Some(Duration::from_secs(60 + 2 + 60 + 60)));
    /// ```
    pub fn profile(mut self, profile: &Profile) -> Self {
        self.timeout = profile.timeout.or(self.timeout);
        self.retry = profile.retry.unwrap_or(self.retry);
        self.backoff = profile.backoff.or(self.backoff);
        self.jitter = profile.jitter.unwrap_or(self.jitter);
        self.retry_after_max = profile.retry_after_max.unwrap_or(self.retry_after_max);
        self
    }

    /// Limit for one attempt; an attempt past it fails with [`crate::Rejected::Timeout`]. For
    /// a stream, an attempt lasts to its first item ([`crate::stream`]): the `first_item_timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Limit for the whole operation: every attempt and every wait.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// For streams ([`crate::stream`]): the longest gap between two items after the first;
    /// past it the stream yields [`crate::Rejected::Idle`] and ends.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// For streams that commit past their first item ([`crate::stream::Commit`]): the most
    /// items held before the one that commits (default 10 000). One more ends the attempt
    /// with [`crate::Rejected::Uncommitted`], a transient error, instead of holding all that
    /// a provider sends without ever committing.
    pub fn commit_hold(mut self, items: usize) -> Self {
        self.commit_hold = items;
        self
    }

    /// Hedges: when an attempt has neither answered nor (for a stream) committed within
    /// `delay`, one more attempt starts beside it, up to `count` (1 to 3), each drawn from
    /// the retries; the first to succeed wins and the others are dropped, counted nowhere.
    /// The racers run inside the caller's task. What `hedge = "1 after 800ms"` does.
    ///
    /// ```
    /// use resil_runtime::Policy;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder()
    ///     .timeout(Duration::from_secs(5))
    ///     .retry(1)
    ///     .hedge(1, Duration::from_millis(800))
    ///     .build()
    ///     .unwrap();
    /// let mut calls = 0;
    /// let answer = policy
    ///     .run(|| {
    ///         calls += 1;
    ///         // The first call is slow: the hedge, started at 800 ms, answers first.
    ///         let delay = if calls == 1 { 4000 } else { 100 };
    ///         async move {
    ///             tokio::time::sleep(Duration::from_millis(delay)).await;
    ///             Ok::<_, resil_runtime::Rejected>(delay)
    ///         }
    ///     })
    ///     .await;
    /// assert_eq!(answer, Ok(100));
    /// # }
    /// ```
    pub fn hedge(mut self, count: u32, delay: Duration) -> Self {
        self.hedge = Some((count, delay));
        self
    }

    /// Extra attempts after the first, made only for transient errors.
    pub fn retry(mut self, retries: u32) -> Self {
        self.retry = retries;
        self
    }

    /// The longest `Retry-After` a retry waits for (default 60 s): an error asking for more,
    /// or for more than what is left of the deadline, ends the operation at once and keeps its
    /// `retry_after()` for the caller. Retrying sooner would be rude; waiting that long is the
    /// caller's decision.
    pub fn retry_after_max(mut self, longest: Duration) -> Self {
        self.retry_after_max = longest;
        self
    }

    /// Exponential backoff from `base` up to `cap` (default `300ms..8s`).
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff = Some((base, cap));
        self
    }

    /// How waits are drawn (default [`Jitter::Full`]).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Draws waits from a generator seeded with `seed`, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The process-wide breaker called `name`, shared with every policy that names it.
    pub fn breaker_named(
        mut self,
        name: impl Into<String>,
        threshold: u32,
        cooldown: Duration,
    ) -> Self {
        self.breaker = BreakerSpec::Named(name.into(), threshold, cooldown);
        self
    }

    /// Keys the policy by `label` (`model`, `(provider, model)`, `user`): the policy is then a
    /// `Policy<Keyed>`, run with [`Policy::run_keyed`](crate::Policy::run_keyed), and keeps a breaker, a bulkhead or
    /// rate gates per value of the key, as `breaker_per_key`, `bulkhead_per_key`,
    /// `rate_per_key` and `token_rate_per_key` say (see [`Keys`](crate::Keys)).
    pub fn keyed(self, label: impl Into<Arc<str>>) -> PolicyBuilder<Keyed, C> {
        let mut builder = self.retype(|classify| classify);
        builder.key = Some(label.into());
        builder
    }

    /// One breaker per key; `label` names them `label=key` (and keys the policy, as
    /// [`PolicyBuilder::keyed`]).
    pub fn breaker_per_key(
        self,
        label: impl Into<Arc<str>>,
        threshold: u32,
        cooldown: Duration,
    ) -> PolicyBuilder<Keyed, C> {
        let mut builder = self.keyed(label);
        builder.breaker = BreakerSpec::PerKey(threshold, cooldown);
        builder
    }

    /// How the named or per-key breaker judges its provider (default: consecutive failures,
    /// as many as the threshold given with the breaker); see [`BreakerKind`]. With a window in
    /// time and a [`rate`](Self::rate), `build` refuses a minimum the rate cannot reach in it.
    ///
    /// ```
    /// use resil_runtime::{BreakerKind, Policy, WindowSize};
    /// use std::time::Duration;
    ///
    /// let window = WindowSize::Time(Duration::from_secs(30)); // or WindowSize::Calls(20)
    /// let policy = Policy::builder()
    ///     .breaker_named("search-doc", 5, Duration::from_secs(30))
    ///     .breaker_kind(BreakerKind::FailureRate { percent: 25, window, min_calls: 10 })
    ///     .build()
    ///     .unwrap();
    /// assert!(matches!(policy.breaker().unwrap().config().kind(), BreakerKind::FailureRate { .. }));
    /// ```
    pub fn breaker_kind(mut self, kind: BreakerKind) -> Self {
        self.breaker_kind = kind;
        self
    }

    /// A breaker you created and may share by hand.
    pub fn breaker(mut self, breaker: Arc<Breaker>) -> Self {
        self.breaker = BreakerSpec::Given(breaker);
        self
    }

    /// Retries may add at most `ratio` (0.2 for 20 %) to first attempts over a sliding
    /// 10-second window, plus `min_per_sec` retries per second (see [`RetryBudget`](crate::RetryBudget)).
    pub fn retry_budget(mut self, ratio: f64, min_per_sec: f64) -> Self {
        self.budget = Some((ratio, min_per_sec));
        self
    }

    /// Inside another operation, keep this policy's own retry allowance instead of drawing
    /// from the enclosing one's (`nested = "independent"`). See [`crate::operation`].
    pub fn independent(mut self, independent: bool) -> Self {
        self.independent = independent;
        self
    }

    /// Sends this policy's events to `listener` too, before the global listeners
    /// ([`crate::events::add_global_listener`]); a second call replaces the first.
    pub fn listener(mut self, listener: Arc<dyn Listener>) -> Self {
        self.listener = Some(Arc::new(Both(listener)));
        self
    }

    /// The same settings, keyed as `L` and judging errors by what `classify` makes of this
    /// builder's classifier.
    fn retype<L, D>(self, classify: impl FnOnce(C) -> D) -> PolicyBuilder<L, D> {
        PolicyBuilder {
            name: self.name,
            timeout: self.timeout,
            deadline: self.deadline,
            idle: self.idle,
            commit_hold: self.commit_hold,
            hedge: self.hedge,
            retry: self.retry,
            retry_after_max: self.retry_after_max,
            backoff: self.backoff,
            jitter: self.jitter,
            seed: self.seed,
            breaker: self.breaker,
            breaker_kind: self.breaker_kind,
            key: self.key,
            per_key: self.per_key,
            max_keys: self.max_keys,
            bulkhead: self.bulkhead,
            bulkhead_queue: self.bulkhead_queue,
            rate: self.rate,
            token_rate: self.token_rate,
            exact: self.exact,
            learn: self.learn,
            budget: self.budget,
            independent: self.independent,
            by_priority: self.by_priority,
            fair: self.fair,
            batch_share: self.batch_share,
            listener: self.listener,
            #[cfg(feature = "shared")]
            shared: self.shared,
            keyed: PhantomData,
            classify: classify(self.classify),
        }
    }
}

impl<C> PolicyBuilder<Keyed, C> {
    /// Each key gets its own rate gate, as [`PolicyBuilder::rate`] sets it.
    pub fn rate_per_key(mut self) -> Self {
        self.per_key.rate = true;
        self
    }

    /// Each key gets its own token gate, as [`PolicyBuilder::token_rate`] sets it.
    pub fn token_rate_per_key(mut self) -> Self {
        self.per_key.token_rate = true;
        self
    }
}
