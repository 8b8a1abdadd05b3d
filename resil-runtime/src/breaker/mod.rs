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

mod registry;

pub(crate) use registry::named;
pub use registry::{BreakerKey, KeyedBreakers};

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::{lock, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Mutex, Ordering};
use crate::{ConfigError, Rejected};

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// The state a breaker is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; transient failures are counted.
    Closed,
    /// Calls fail at once with [`Rejected::BreakerOpen`].
    Open,
    /// The cooldown passed: one probe decides whether the breaker closes or opens again.
    HalfOpen,
}

impl BreakerState {
    fn from_u8(state: u8) -> Self {
        match state {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        })
    }
}

/// A breaker's tuning: consecutive transient failures that open it, and how long it stays
/// open before a probe.
///
/// ```
/// use resil_runtime::BreakerConfig;
/// use std::time::Duration;
///
/// let config = BreakerConfig::new(5, Duration::from_secs(30))?;
/// assert_eq!(config, BreakerConfig::default());
/// # Ok::<(), resil_runtime::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    threshold: u32,
    cooldown: Duration,
}

impl Default for BreakerConfig {
    /// 5 consecutive transient failures, 30 s cooldown.
    fn default() -> Self {
        BreakerConfig {
            threshold: 5,
            cooldown: Duration::from_secs(30),
        }
    }
}

impl BreakerConfig {
    /// Opens after `threshold` consecutive transient failures, probes after `cooldown`.
    pub fn new(threshold: u32, cooldown: Duration) -> Result<Self, ConfigError> {
        if threshold == 0 {
            return Err(ConfigError::ZeroBreakerThreshold);
        }
        if cooldown.is_zero() {
            return Err(ConfigError::ZeroDuration {
                key: "breaker_cooldown",
            });
        }
        Ok(BreakerConfig {
            threshold,
            cooldown,
        })
    }

    /// Consecutive transient failures that open the breaker.
    pub const fn threshold(&self) -> u32 {
        self.threshold
    }

    /// Time from opening to the first probe.
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }
}

/// A state change, reported to the caller that caused it so it can emit an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
}

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
    name: Arc<str>,
    config: BreakerConfig,
    state: AtomicU8,
    failures: AtomicU32,
    /// When it last opened, in nanoseconds since `created`: read without a lock, so an open
    /// breaker rejects as cheaply as a closed one admits.
    opened_at: AtomicU64,
    created: Instant,
    /// Set on every keyed lookup, cleared by the eviction sweep (second chance).
    pub(crate) recently_used: AtomicBool,
    /// Whether a half-open probe is in flight.
    probing: Mutex<bool>,
    verdict: Notify,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("state", &self.state())
            .field("failures", &self.failures.load(Ordering::Relaxed))
            .finish()
    }
}

/// The outcome of the synchronous admission check.
#[derive(Debug)]
pub(crate) enum Admit<'b> {
    Pass(Admission<'b>),
    Wait,
    Reject(Rejected),
}

impl Breaker {
    /// A closed breaker. Its name appears in [`Rejected::BreakerOpen`] and in events.
    pub fn new(name: impl Into<Arc<str>>, config: BreakerConfig) -> Self {
        Breaker {
            name: name.into(),
            config,
            state: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            opened_at: AtomicU64::new(0),
            created: Instant::now(),
            recently_used: AtomicBool::new(false),
            probing: Mutex::new(false),
            verdict: Notify::new(),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its tuning.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// The state as of the last call. Lazy: an open breaker whose cooldown has passed still
    /// reads `Open` until the next caller turns it half-open.
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// True when closed with no failure counted: nothing would be lost by forgetting it.
    pub(crate) fn is_idle(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLOSED && self.failures.load(Ordering::Relaxed) == 0
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
        if self.state.load(Ordering::Acquire) == CLOSED {
            Admit::Pass(Admission::new(self, false))
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
        if self.state.load(Ordering::Acquire) == OPEN {
            let retry_in = self.cooling(now);
            if !retry_in.is_zero() {
                return Admit::Reject(self.rejection(retry_in));
            }
        }
        let mut probing = lock(&self.probing);
        match self.state.load(Ordering::Acquire) {
            CLOSED => Admit::Pass(Admission::new(self, false)),
            OPEN if self.cooling(now).is_zero() => {
                self.state.store(HALF_OPEN, Ordering::Release);
                *probing = true;
                Admit::Pass(Admission::new(self, true).with_transition(Transition {
                    from: BreakerState::Open,
                    to: BreakerState::HalfOpen,
                }))
            }
            OPEN => Admit::Reject(self.rejection(self.cooling(now))),
            _ if *probing => Admit::Wait,
            _ => {
                *probing = true;
                Admit::Pass(Admission::new(self, true))
            }
        }
    }

    /// Time left in the cooldown since the breaker last opened.
    fn cooling(&self, now: Instant) -> Duration {
        let opened_at = self.created + Duration::from_nanos(self.opened_at.load(Ordering::Acquire));
        self.config
            .cooldown
            .saturating_sub(now.saturating_duration_since(opened_at))
    }

    fn mark_opened(&self) {
        let since = Instant::now().saturating_duration_since(self.created);
        self.opened_at
            .store(since.as_nanos() as u64, Ordering::Release);
    }

    /// Time until an open breaker lets a probe through (zero unless open).
    pub fn retry_in(&self, now: Instant) -> Duration {
        if self.state.load(Ordering::Acquire) != OPEN {
            return Duration::ZERO;
        }
        self.cooling(now)
    }

    /// The rejection for a call that met this breaker open.
    pub(crate) fn rejection(&self, retry_in: Duration) -> Rejected {
        Rejected::BreakerOpen {
            breaker: Arc::clone(&self.name),
            retry_in,
        }
    }

    pub(crate) fn record(&self, probe: bool, verdict: Verdict) -> Option<Transition> {
        if probe {
            return self.record_probe(verdict);
        }
        match verdict {
            Verdict::Success => {
                // Load first: under load most successes find the count at zero and leave the
                // cache line shared.
                if self.failures.load(Ordering::Relaxed) != 0 {
                    self.failures.store(0, Ordering::Relaxed);
                }
                None
            }
            Verdict::Failure => {
                // A late failure of a call admitted before the breaker opened counts for nothing.
                if self.state.load(Ordering::Acquire) != CLOSED {
                    return None;
                }
                let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                if failures < self.config.threshold {
                    return None;
                }
                let _probing = lock(&self.probing);
                if self.state.load(Ordering::Acquire) != CLOSED {
                    return None;
                }
                self.mark_opened();
                self.failures.store(0, Ordering::Relaxed);
                self.state.store(OPEN, Ordering::Release);
                Some(Transition {
                    from: BreakerState::Closed,
                    to: BreakerState::Open,
                })
            }
            Verdict::Neutral => None,
        }
    }

    fn record_probe(&self, verdict: Verdict) -> Option<Transition> {
        let transition = {
            let mut probing = lock(&self.probing);
            *probing = false;
            match verdict {
                Verdict::Success => {
                    self.failures.store(0, Ordering::Relaxed);
                    self.state.store(CLOSED, Ordering::Release);
                    Some(BreakerState::Closed)
                }
                Verdict::Failure => {
                    self.mark_opened();
                    self.state.store(OPEN, Ordering::Release);
                    Some(BreakerState::Open)
                }
                Verdict::Neutral => None,
            }
        };
        self.verdict.notify_waiters();
        transition.map(|to| Transition {
            from: BreakerState::HalfOpen,
            to,
        })
    }
}

/// Permission to make one call through a [`Breaker`]. Report how the call ended with
/// [`Admission::record`]; dropping it unrecorded (the call was cancelled) counts for nothing
/// and, for a probe, lets the next caller probe.
#[must_use = "record the call's verdict, or drop the admission if the call was cancelled"]
#[derive(Debug)]
pub struct Admission<'b> {
    breaker: &'b Breaker,
    probe: bool,
    transition: Option<Transition>,
}

impl<'b> Admission<'b> {
    fn new(breaker: &'b Breaker, probe: bool) -> Self {
        Admission {
            breaker,
            probe,
            transition: None,
        }
    }

    fn with_transition(mut self, transition: Transition) -> Self {
        self.transition = Some(transition);
        self
    }

    /// The breaker that admitted the call.
    pub fn breaker(&self) -> &'b Breaker {
        self.breaker
    }

    /// Is this call the half-open probe?
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// The transition that admitting this call caused (open → half-open), if any.
    pub fn transition(&self) -> Option<Transition> {
        self.transition
    }

    /// Reports how the call ended; returns the state change it caused, if any.
    pub fn record(self, verdict: Verdict) -> Option<Transition> {
        let this = std::mem::ManuallyDrop::new(self);
        this.breaker.record(this.probe, verdict)
    }

    /// Hands the duty of recording (or, for a cancelled probe, of releasing the slot with
    /// `record(true, Verdict::Neutral)`) to the caller: whether it is the probe, and the
    /// transition admitting it caused.
    pub(crate) fn detach(self) -> (bool, Option<Transition>) {
        let this = std::mem::ManuallyDrop::new(self);
        (this.probe, this.transition)
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.record_probe(Verdict::Neutral);
        }
    }
}
