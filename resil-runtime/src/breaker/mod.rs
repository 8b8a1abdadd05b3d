//! [`Breaker`]: stops calling a provider that keeps failing, and probes it back.
//!
//! A breaker counts consecutive transient failures. At `threshold` it opens: calls fail at
//! once with [`Rejected::BreakerOpen`] and the provider gets time to recover. Once
//! `cooldown` has passed, the next caller is let through as the one probe (half-open); the
//! callers that arrive while the probe is in flight wait for its verdict. A successful probe
//! closes the breaker and lets them through; a failed one re-opens it and rejects them
//! without a call. A probe that is dropped, or ends in a permanent error, frees the slot for
//! the next caller.
//!
//! Transitions are lazy: they happen on the next call, with no timer and no background task.
//! While closed, the admission check is one atomic load.
//!
//! Every transition starts a new generation, and every admission belongs to the generation
//! that admitted it: a call admitted while closed that fails after the breaker opened, and
//! after a probe closed it again, counts for nothing instead of re-opening it.

mod admission;
mod config;
mod directory;
mod keyed;
#[cfg(feature = "shared")]
mod remote;
#[cfg(feature = "shared")]
pub(crate) mod summed;
mod time_window;
mod verdicts;
mod window;
mod word;

pub use crate::breaker_state::{BreakerState, Transition};
pub use admission::Admission;
pub(crate) use admission::{Admit, Ticket};
pub use config::{BreakerConfig, BreakerKind, WindowSize};
pub use directory::{breakers, find, BreakerStatus};
pub(crate) use directory::{named, watch_breaker, watch_keys, KeptBreakers};
pub use keyed::{KeyedBreaker, KeyedBreakers};

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::Rejected;
use window::Window;
use word::{Word, CLOSED, HALF_OPEN, OPEN};

/// How an admitted call ended, as far as the breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The provider answered: closes a half-open breaker, resets the failure count.
    Success,
    /// A transient failure (including an attempt timeout): counts toward opening.
    Failure,
    /// A permanent error, a cancellation, a rejection: counts for nothing.
    Neutral,
}

/// A circuit breaker. Share it with an `Arc`; [`crate::Policy`] does that for you.
///
/// ```
/// use resil_runtime::{Breaker, BreakerConfig, BreakerState, Verdict};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let breaker = Breaker::new("payments", BreakerConfig::new(2, Duration::from_secs(10))?);
/// for _ in 0..2 {
///     let admission = breaker.admit().await?;
///     admission.record(Verdict::Failure);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert!(breaker.admit().await.is_err());
/// # Ok(()) }
/// ```
pub struct Breaker {
    name: Name,
    config: BreakerConfig,
    /// See [`Word`]. Transitions are made under `probing`'s lock; counting a failure or a
    /// success is a compare-and-swap that no transition can slip between.
    word: AtomicU64,
    /// When it last opened, in signed nanoseconds from `created`: read without a lock, so an
    /// open breaker rejects as cheaply as a closed one admits. Signed, because a breaker shared
    /// by two runtimes (two paused test clocks) may see instants from before `created`.
    opened_at: AtomicU64,
    created: Instant,
    /// Whether a half-open probe is in flight; its lock serialises transitions.
    probing: Mutex<bool>,
    verdict: Notify,
    /// Forced open by an operator: no probe until [`Breaker::reset`]. Read only when the
    /// breaker is not closed, so the closed path stays one load.
    forced: AtomicBool,
    /// The last calls, for a failure-rate or slow-call breaker; locked after `probing`. Boxed:
    /// a time window is a few words, and the breakers that have none (one per key, often)
    /// should not carry them.
    window: Option<Box<Mutex<Window>>>,
    /// Its place in a shared store, for the breaker of a shared policy.
    #[cfg(feature = "shared")]
    shared: std::sync::OnceLock<remote::Shared>,
}

/// A breaker's name. A keyed registry's breaker holds its label and the registry's own copy of
/// its key, and writes `label=key` only when first asked (an event, a rejection): a key's
/// name is kept once, not again in its breaker's (`Keys::MAX_BYTES_PER_KEY`).
enum Name {
    Whole(Arc<str>),
    Keyed {
        label: Arc<str>,
        key: Arc<str>,
        written: OnceLock<Arc<str>>,
    },
}

impl Name {
    #[inline]
    fn whole(&self) -> &Arc<str> {
        match self {
            Name::Whole(name) => name,
            Name::Keyed {
                label,
                key,
                written,
            } => match written.get() {
                Some(name) => name,
                None => Self::written(label, key, written),
            },
        }
    }

    /// Out of line, once per breaker: a rejection stays as cheap as an `Arc`'s clone.
    #[cold]
    #[inline(never)]
    fn written<'a>(label: &str, key: &str, written: &'a OnceLock<Arc<str>>) -> &'a Arc<str> {
        written.get_or_init(|| Arc::from(format!("{label}={key}")))
    }
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name())
            .field("config", &self.config)
            .field("state", &self.state())
            .field("failures", &self.failures())
            .finish()
    }
}

impl Breaker {
    /// A closed breaker. Its name appears in [`Rejected::BreakerOpen`] and in events.
    pub fn new(name: impl Into<Arc<str>>, config: BreakerConfig) -> Self {
        Breaker {
            name: Name::Whole(name.into()),
            config,
            word: AtomicU64::new(CLOSED),
            opened_at: AtomicU64::new(0),
            created: Instant::now(),
            probing: Mutex::new(false),
            verdict: Notify::new(),
            forced: AtomicBool::new(false),
            window: Window::of(config.kind()).map(|window| Box::new(Mutex::new(window))),
            #[cfg(feature = "shared")]
            shared: std::sync::OnceLock::new(),
        }
    }

    /// The breaker of `label` for the key named `key`, named `label=key`.
    pub(crate) fn keyed(label: &Arc<str>, key: &Arc<str>, config: BreakerConfig) -> Self {
        let mut breaker = Breaker::new("", config);
        breaker.name = Name::Keyed {
            label: Arc::clone(label),
            key: Arc::clone(key),
            written: OnceLock::new(),
        };
        breaker
    }

    /// The breaker's name: `label=key` for a breaker of a keyed registry.
    pub fn name(&self) -> &str {
        self.name.whole()
    }

    /// The name without its key: the registry's label for a keyed breaker, else the name.
    ///
    /// ```
    /// use resil_runtime::{Breaker, BreakerConfig, KeyedBreakers};
    ///
    /// let keyed = KeyedBreakers::new("model", BreakerConfig::default());
    /// assert_eq!(keyed.get("gpt=4o").label(), "model");
    /// assert_eq!(keyed.get("gpt=4o").key(), Some(r#""gpt=4o""#));
    /// let named = Breaker::new("a=b", BreakerConfig::default());
    /// assert_eq!((named.label(), named.key()), ("a=b", None));
    /// ```
    pub fn label(&self) -> &str {
        match &self.name {
            Name::Whole(name) => name,
            Name::Keyed { label, .. } => label,
        }
    }

    /// The key of a breaker of a keyed registry, as its unambiguous name (see [`Key`](crate::Key)).
    pub fn key(&self) -> Option<&str> {
        match &self.name {
            Name::Whole(_) => None,
            Name::Keyed { key, .. } => Some(key),
        }
    }

    /// Its tuning.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// The state as of the last call. Lazy: an open breaker whose cooldown has passed still
    /// reads `Open` until the next caller turns it half-open.
    pub fn state(&self) -> BreakerState {
        BreakerState::from_bits(self.load().state())
    }

    /// Consecutive transient failures counted while closed.
    pub fn failures(&self) -> u32 {
        self.load().failures()
    }

    /// Incremented by every transition: a verdict of a call admitted in another generation
    /// counts for nothing, so a call admitted before the breaker opened cannot re-open it after
    /// a probe closed it.
    pub fn generation(&self) -> u32 {
        self.load().generation()
    }

    fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// Closed with no failure counted: nothing would be lost by forgetting it.
    pub(crate) fn is_idle(&self) -> bool {
        let word = self.load();
        let window_clean = self
            .window
            .as_ref()
            .is_none_or(|window| lock(window).bad() == 0);
        word.state() == CLOSED && word.failures() == 0 && window_clean
    }

    /// Whether verdicts need the call's duration (a slow-call breaker).
    pub(crate) fn times_calls(&self) -> bool {
        matches!(self.config.kind(), BreakerKind::SlowCall { .. })
    }

    /// Asks to make a call. Closed: admitted at once. Open: rejected, unless the cooldown has
    /// passed, in which case this caller becomes the probe. Half-open with a probe in flight:
    /// waits for its verdict (cancel the future to give up; [`crate::Policy`] bounds the wait
    /// by the attempt's timeout and the deadline).
    pub async fn admit(&self) -> Result<Admission<'_>, Rejected> {
        if let Admit::Pass(admission) = self.try_admit_closed() {
            return Ok(admission);
        }
        loop {
            // Registered before the check, so a verdict between check and await is not lost.
            let notified = self.verdict.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_admit(Instant::now) {
                Admit::Pass(admission) => return Ok(admission),
                Admit::Reject(rejected) => return Err(rejected),
                Admit::Wait => notified.await,
            }
        }
    }

    /// The hot path: one atomic load.
    #[inline]
    pub(crate) fn try_admit_closed(&self) -> Admit<'_> {
        let word = self.load();
        if word.state() == CLOSED {
            Admit::Pass(Admission::new(self, Ticket::new(false, word)))
        } else {
            Admit::Wait
        }
    }

    /// The whole admission check. `now` is read only when the breaker is not closed, so the
    /// closed path stays one atomic load.
    pub(crate) fn try_admit(&self, now: impl FnOnce() -> Instant) -> Admit<'_> {
        if let pass @ Admit::Pass(_) = self.try_admit_closed() {
            return pass;
        }
        let now = now();
        if self.load().state() == OPEN {
            let retry_in = self.cooling(now);
            if !retry_in.is_zero() {
                return Admit::Reject(self.rejection(retry_in));
            }
        }
        let mut probing = lock(&self.probing);
        let word = self.load();
        match word.state() {
            CLOSED => Admit::Pass(Admission::new(self, Ticket::new(false, word))),
            OPEN if self.cooling(now).is_zero() => {
                let half_open = word.next(HALF_OPEN);
                self.word.store(half_open.0, Ordering::Release);
                *probing = true;
                Admit::Pass(
                    Admission::new(self, Ticket::new(true, half_open)).with_transition(
                        Transition {
                            from: BreakerState::Open,
                            to: BreakerState::HalfOpen,
                        },
                    ),
                )
            }
            OPEN => Admit::Reject(self.rejection(self.cooling(now))),
            _ if *probing => Admit::Wait,
            _ => {
                *probing = true;
                Admit::Pass(Admission::new(self, Ticket::new(true, word)))
            }
        }
    }

    /// [`Breaker::force_open`] without telling anyone: the caller reports what it returns.
    pub(crate) fn open_by_hand(&self) -> Option<Transition> {
        let transition = {
            let mut probing = lock(&self.probing);
            self.forced.store(true, Ordering::Release);
            let word = self.load();
            *probing = false;
            (word.state() != OPEN).then(|| {
                self.open(word);
                Transition {
                    from: BreakerState::from_bits(word.state()),
                    to: BreakerState::Open,
                }
            })
        };
        self.verdict.notify_waiters();
        transition
    }

    /// [`Breaker::reset`] without telling anyone: the caller reports what it returns.
    pub(crate) fn close_by_hand(&self) -> Option<Transition> {
        let transition = {
            let mut probing = lock(&self.probing);
            self.forced.store(false, Ordering::Release);
            let word = self.load();
            *probing = false;
            self.word.store(word.next(CLOSED).0, Ordering::Release);
            self.forget_calls();
            (word.state() != CLOSED).then(|| Transition {
                from: BreakerState::from_bits(word.state()),
                to: BreakerState::Closed,
            })
        };
        self.verdict.notify_waiters();
        transition
    }

    /// Whether an operator forced the breaker open.
    pub fn is_forced_open(&self) -> bool {
        self.forced.load(Ordering::Acquire)
    }

    /// Time left in the cooldown since the breaker last opened. An opening that lies in the
    /// future of `now` was measured on another clock (a breaker outliving a paused test
    /// runtime): the cooldown then counts from `now`, so it lasts one cooldown at most.
    /// Forced open: forever.
    fn cooling(&self, now: Instant) -> Duration {
        if self.forced.load(Ordering::Acquire) {
            return Duration::MAX;
        }
        let opened_at = self.opened_at.load(Ordering::Acquire) as i64;
        let now = self.since_created(now);
        if now < opened_at {
            let _ = self.opened_at.compare_exchange(
                opened_at as u64,
                now as u64,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            return self.config.cooldown();
        }
        let elapsed = Duration::from_nanos(now.abs_diff(opened_at));
        self.config.cooldown().saturating_sub(elapsed)
    }

    /// Signed nanoseconds from `created` to `at`, saturating.
    fn since_created(&self, at: Instant) -> i64 {
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        match at.checked_duration_since(self.created) {
            Some(after) => nanos(after),
            None => -nanos(self.created.saturating_duration_since(at)),
        }
    }

    /// Opens the breaker: called with the transition lock held.
    fn open(&self, from: Word) {
        let now = self.since_created(Instant::now());
        self.opened_at.store(now as u64, Ordering::Release);
        self.word.store(from.next(OPEN).0, Ordering::Release);
    }

    /// Time until an open breaker lets a probe through (zero unless open).
    pub fn retry_in(&self, now: Instant) -> Duration {
        if self.load().state() != OPEN {
            return Duration::ZERO;
        }
        self.cooling(now)
    }

    /// Why a call arriving now would make no call: the breaker is open and cooling down, or
    /// half-open with its probe out. What a route asks before choosing this breaker's key, for
    /// each target: inlined, as a closed breaker's answer is one load (out of line, the
    /// rejection's return cost a routed call 20 instructions).
    #[inline]
    pub(crate) fn turns_away(&self, now: Instant) -> Option<Rejected> {
        match self.load().state() {
            CLOSED => None,
            OPEN if !self.cooling(now).is_zero() => Some(self.rejection(self.cooling(now))),
            OPEN => None,
            _ => (*lock(&self.probing)).then(|| self.rejection(Duration::ZERO)),
        }
    }

    /// The rejection for a call that met this breaker open.
    #[inline]
    pub(crate) fn rejection(&self, retry_in: Duration) -> Rejected {
        Rejected::BreakerOpen {
            breaker: Arc::clone(self.name.whole()),
            retry_in,
        }
    }
}
