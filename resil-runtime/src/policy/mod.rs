//! [`Policy`]: the policies put together in the order that makes them work.
//!
//! A policy with state per key (a breaker, a bulkhead, rate gates per model or per user) is a
//! `Policy<Keyed>` and runs only through [`Policy::run_keyed`] and [`Policy::execute_keyed`];
//! every other policy runs through [`Policy::run`] and [`Policy::execute`]. The type says
//! which, so a keyed policy cannot be run without its key (and silently without a breaker).

mod builder;
mod keys;
mod tuning;

pub use builder::PolicyBuilder;
pub(crate) use keys::Scope;
pub use keys::{KeyScope, Keys};
pub use tuning::Tuning;
#[cfg(feature = "config")]
pub(crate) use tuning::{
    built as policies_built, registered as registered_tunings, Overlay, Revising,
};
pub(crate) use tuning::{Current, Tunings};

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::breaker::Breaker;
use crate::budget::RetryBudget;
use crate::bulkhead::Bulkhead;
use crate::events::{self, Listener};
use crate::gate::RateGate;
use crate::{Backoff, ConfigError, Jitter};

/// Marks a policy without per-key breakers: run it with [`Policy::run`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Unkeyed;

/// Marks a policy with state per key (see [`Keys`]): run it with [`Policy::run_keyed`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Keyed;

/// Marks a policy whose errors say themselves whether they are worth retrying, through their
/// [`Transient`](crate::Transient) impl: every policy but one given a classifier
/// ([`PolicyBuilder::transient`]), which is a `Policy<K, fn(&E) -> R>` and judges its errors
/// of type `E` by that function.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByTransient;

/// Timeout, deadline, retries with backoff, a circuit breaker and a bulkhead, applied in
/// this order: bulkhead (one permit for the whole operation) → retry loop → breaker check →
/// timeout → call. Build it once and share it; its state (breaker, bulkhead) is shared by
/// every call made through it.
///
/// ```
/// use resil_runtime::{Policy, Rejected, Transient};
/// use std::time::Duration;
///
/// #[derive(Debug)]
/// enum Error { Busy, Rejected(Rejected) }
/// impl Transient for Error {
///     fn is_transient(&self) -> bool {
///         match self { Error::Busy => true, Error::Rejected(r) => r.is_transient() }
///     }
/// }
/// impl From<Rejected> for Error {
///     fn from(r: Rejected) -> Self { Error::Rejected(r) }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder()
///     .timeout(Duration::from_secs(2))
///     .retry(2)
///     .breaker_named("inventory", 5, Duration::from_secs(30))
///     .bulkhead(8)
///     .build()?;
///
/// let mut calls = 0;
/// let stock: Result<u32, Error> = policy
///     .run(|| {
///         calls += 1;
///         let busy = calls < 3;
///         async move { if busy { Err(Error::Busy) } else { Ok(42) } }
///     })
///     .await;
/// assert_eq!(stock.unwrap(), 42);
/// assert_eq!(calls, 3);
/// # Ok(()) }
/// ```
pub struct Policy<K = Unkeyed, C = ByTransient> {
    pub(crate) settings: Settings,
    keyed: PhantomData<fn() -> K>,
    /// What judges the errors: [`ByTransient`], or the classifier given to the builder.
    pub(crate) classify: C,
}

/// What a policy is made of, whatever its keying: what an [`Execution`] reads.
pub(crate) struct Settings {
    pub(crate) name: Arc<str>,
    /// Its limits and retries: the current ones, and every one applied before.
    pub(crate) tunings: Arc<Tunings>,
    pub(crate) rng: Option<Mutex<SmallRng>>,
    /// The breaker all calls share (named, or given to the builder).
    pub(crate) breaker: Option<Arc<Breaker>>,
    /// What is kept per key, for a keyed policy.
    pub(crate) keys: Option<Arc<Keys>>,
    /// The bulkhead and gates all calls share; those per key are in `keys`.
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) rate: Option<RateGate>,
    pub(crate) token_rate: Option<RateGate>,
    /// Whether calls take slots in a rate gate, shared or per key: one check on the hot path.
    pub(crate) gated: bool,
    /// Whether a rate gate learns from the provider's answers: its calls listen for them.
    pub(crate) learns: bool,
    /// Whether anything stands before a call (a breaker, a bulkhead or a gate, shared or per
    /// key): a policy with none goes straight to the call, past their checks.
    pub(crate) admits: bool,
    /// Whether the bulkhead, shared or per key, adapts its limit: it then hears each
    /// attempt's end, and a fixed one pays one check.
    pub(crate) adaptive: bool,
    /// An adaptive bulkhead or a gate that learns: each attempt's end is heard, whether or
    /// not a listener is (one flag, read once per operation).
    pub(crate) attentive: bool,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) independent: bool,
    /// The most items a stream's attempt holds before the one that commits it.
    pub(crate) commit_hold: usize,
    /// Hedged attempts, when declared.
    pub(crate) hedge: Option<Hedge>,
    pub(crate) listener: Option<Arc<dyn Listener>>,
    /// The metrics' handles, registered at the first call.
    #[cfg(feature = "metrics")]
    pub(crate) meters: crate::meter::Slot,
}

/// `hedge = "N after DELAY"`: up to `count` more attempts, each started when the racers so
/// far have run `delay` without an answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hedge {
    pub(crate) count: u32,
    pub(crate) delay: Duration,
}

/// The breaker one operation goes through.
pub(crate) enum BreakerRef<'p> {
    Shared(&'p Breaker),
    Keyed(Arc<Breaker>),
}

impl BreakerRef<'_> {
    /// Another handle on the same breaker, for what outlives this borrow (a probe's wait, a
    /// hedge's admission).
    pub(crate) fn clone_ref(&self) -> Self {
        match self {
            BreakerRef::Shared(breaker) => BreakerRef::Shared(breaker),
            BreakerRef::Keyed(breaker) => BreakerRef::Keyed(Arc::clone(breaker)),
        }
    }

    pub(crate) fn get(&self) -> &Breaker {
        match self {
            BreakerRef::Shared(breaker) => breaker,
            BreakerRef::Keyed(breaker) => breaker,
        }
    }
}

impl<K, C> fmt::Debug for Policy<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let settings = &self.settings;
        let mut d = f.debug_struct("Policy");
        d.field("name", &settings.name)
            .field("tuning", &*settings.tunings.current())
            .field("breaker", &settings.breaker)
            .field("keys", &settings.keys)
            .field("bulkhead", &settings.bulkhead)
            .field("rate", &settings.rate)
            .field("token_rate", &settings.token_rate)
            .field("budget", &settings.budget)
            .field("independent", &settings.independent)
            .finish()
    }
}

impl Policy {
    /// A builder with nothing enabled: no timeout, no retry, no breaker, no bulkhead.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }
}

impl<C> Policy<Keyed, C> {
    /// What is kept per key.
    pub fn keys(&self) -> Option<&Keys> {
        self.settings.keys.as_deref()
    }
}

impl<K, C> Policy<K, C> {
    fn new(settings: Settings, classify: C) -> Self {
        Policy {
            settings,
            keyed: PhantomData,
            classify,
        }
    }

    /// The policy's name, used in events.
    pub fn name(&self) -> &str {
        &self.settings.name
    }

    /// Extra attempts after the first.
    pub fn retries(&self) -> u32 {
        self.settings.tunings.current().retry
    }

    /// The limits and retries new operations start with (see [`Tuning`]).
    pub fn tuning(&self) -> Tuning {
        self.settings.tunings.current().clone()
    }

    /// Makes `tuning` the one new operations start with; operations in flight finish under
    /// the one they started with. Refused, with the fix, if it breaks a rule (the policy then
    /// keeps its tuning). As often as you like: a tuning no operation holds any more is freed.
    ///
    /// A tuning set by hand takes the place of the attribute's (or the builder's) values as
    /// the policy's defaults: configuration ([`crate::config`]) overrides it key by key, at once
    /// (the overrides last applied are written over it; refused with
    /// [`ConfigError::Overridden`] if the two break a rule together), and a configuration that
    /// does not mention the policy returns it to this tuning, not to the attribute's.
    pub fn set_tuning(&self, tuning: Tuning) -> Result<(), ConfigError> {
        self.settings.tunings.set(tuning)
    }

    /// The breaker all calls share (named, or given to the builder), if any.
    pub fn breaker(&self) -> Option<&Arc<Breaker>> {
        self.settings.breaker.as_ref()
    }

    /// The longest one operation can take (see [`crate::worst_case`]), counting waits a
    /// server may ask for up to `retry_after_max`. When callers wait in a rate gate or the
    /// bulkhead's queue, that wait lasts as long as the deadline allows: the worst case is the
    /// deadline, and `None` (unbounded) with no deadline.
    pub fn worst_case(&self) -> Option<Duration> {
        let settings = &self.settings;
        let tuning = settings.tunings.current();
        let keys = settings.keys.as_deref();
        let queues = settings.rate.is_some()
            || settings.token_rate.is_some()
            || keys.is_some_and(|keys| keys.gated())
            || settings
                .bulkhead
                .as_ref()
                .or(keys.and_then(Keys::bulkhead))
                .is_some_and(|b| b.queue() > 0);
        if queues {
            return tuning.deadline;
        }
        crate::worst_case(
            tuning.timeout,
            tuning.deadline,
            tuning.retry,
            &tuning.backoff,
            tuning.retry_after_max,
        )
    }

    /// The bulkhead all calls share, if any (one per key is in [`Policy::keys`]).
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.settings.bulkhead.as_ref()
    }

    /// The rate gate (attempts per period) all calls share, if any.
    pub fn rate_gate(&self) -> Option<&RateGate> {
        self.settings.rate.as_ref()
    }

    /// The token gate (cost per period) all calls share, if any.
    pub fn token_gate(&self) -> Option<&RateGate> {
        self.settings.token_rate.as_ref()
    }
}

/// A breaker is reported by its name, label and key.
impl<'a> From<&'a Breaker> for events::BreakerName<'a> {
    fn from(breaker: &'a Breaker) -> Self {
        events::BreakerName {
            name: breaker.name(),
            label: breaker.label(),
            key: breaker.key(),
        }
    }
}

/// The bulkhead gauge counts what the bulkhead holds.
#[cfg(feature = "metrics")]
impl crate::meter::InFlight for Bulkhead {
    fn in_flight(&self) -> usize {
        Bulkhead::in_flight(self)
    }
}

thread_local! {
    /// The backoff's draws for policies without a seed. Plain data, so it is never destroyed:
    /// a retry polled from a thread-local's destructor draws as well (`rand::rng()` panics
    /// there once its own is gone, and a panic there aborts the process).
    static JITTER: RefCell<SmallRng> = RefCell::new(SmallRng::from_os_rng());
}

impl Settings {
    /// The backoff's draw; a `Retry-After` is a floor under it, not a replacement: clients
    /// told the same `Retry-After` would otherwise all come back at the same instant.
    pub(crate) fn wait(
        &self,
        backoff: &Backoff,
        retry: u32,
        previous: Option<Duration>,
        floor: Option<Duration>,
    ) -> Duration {
        let drawn = match &self.rng {
            Some(rng) => backoff.delay(retry, previous, &mut *crate::sync::lock_std(rng)),
            None => JITTER.with(|rng| backoff.delay(retry, previous, &mut *rng.borrow_mut())),
        };
        match (floor, backoff.jitter()) {
            (None, _) => drawn,
            (Some(floor), Jitter::None) => drawn.max(floor),
            (Some(floor), _) => floor.saturating_add(drawn),
        }
    }

    /// Builds and sends an event only when someone listens.
    #[inline]
    pub(crate) fn emit(&self, emit: impl FnOnce(&dyn Listener)) {
        if let Some(listener) = self.listener() {
            emit(&**listener);
        }
    }

    #[inline]
    pub(crate) fn listener(&self) -> Option<&Arc<dyn Listener>> {
        events::resolve(self.listener.as_ref())
    }
}
