//! A simulated provider: heavy-tailed latency, transient, permanent and move-on errors, 429s
//! with Retry-After, hangs, a capacity per fixed window and the limits its answers state.

use std::cell::Cell;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use resil_runtime::{operation, ProviderLimits, Quota, Rejected, Transient};
use tokio::time::Instant;

use crate::plan::{States, TargetSpec, TOKENS_PER_CALL};

/// What a provider (or resil) answers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SimError {
    Transient(Option<Duration>),
    /// A 429, with the wait asked for.
    Throttled(Duration),
    Permanent,
    /// A permanent error of this target only (`#[transient(route)]`).
    MovesOn,
    Rejected(Rejected),
}

impl Transient for SimError {
    fn is_transient(&self) -> bool {
        match self {
            SimError::Transient(_) | SimError::Throttled(_) => true,
            SimError::Permanent | SimError::MovesOn => false,
            SimError::Rejected(rejected) => rejected.is_transient(),
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            SimError::Transient(wait) => *wait,
            SimError::Throttled(wait) => Some(*wait),
            SimError::Rejected(rejected) => rejected.retry_after(),
            _ => None,
        }
    }
    fn is_throttle(&self) -> bool {
        matches!(self, SimError::Throttled(_))
    }
    fn moves_on(&self) -> bool {
        matches!(self, SimError::MovesOn)
    }
}

impl From<Rejected> for SimError {
    fn from(rejected: Rejected) -> Self {
        SimError::Rejected(rejected)
    }
}

/// One provider's state in a running world.
#[derive(Debug)]
pub(crate) struct Provider {
    pub(crate) spec: TargetSpec,
    origin: Instant,
    /// The current window's index and what it served.
    window: Cell<(u128, u64)>,
    /// Whether it answers honestly and at once (the liveness probe at the end).
    pub(crate) honest: Cell<bool>,
}

/// What one call to the provider did, for the checks.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) result: Result<u32, SimError>,
    /// What it stated: limit, remaining, reset.
    pub(crate) stated: Option<(u64, u64, Duration)>,
}

impl Provider {
    pub(crate) fn new(spec: TargetSpec, origin: Instant) -> Provider {
        Provider {
            spec,
            origin,
            window: Cell::new((0, 0)),
            honest: Cell::new(false),
        }
    }

    /// Counts the call at its arrival against the capacity: whether it is served, what is
    /// left, and when the window resets.
    fn arrive(&self) -> Option<(bool, u64, u64, Duration)> {
        let (limit, period) = self.spec.capacity?;
        let elapsed = self.origin.elapsed();
        let index = elapsed.as_nanos() / period.as_nanos();
        let reset = period - Duration::from_nanos((elapsed.as_nanos() % period.as_nanos()) as u64);
        let (mut at, mut served) = self.window.get();
        if at != index {
            (at, served) = (index, 0);
        }
        let allowed = served < limit;
        if allowed {
            served += 1;
        }
        self.window.set((at, served));
        Some((allowed, limit, limit - served, reset))
    }

    /// One call, as the body sees it; draws from the caller's generator.
    pub(crate) async fn call(&self, rng: &Cell<Option<StdRng>>) -> Answer {
        if self.honest.get() {
            return Answer {
                result: Ok(0),
                stated: None,
            };
        }
        let spec = &self.spec;
        let arrival = self.arrive();
        let mut draw = rng.take().expect("one draw at a time");
        let hang = draw.random_bool(spec.p_hang);
        let scale = draw.random_range(f64::EPSILON..1.0).powf(-1.0 / spec.tail);
        let latency = spec.latency.mul_f64(scale.min(1_000.0) * 0.5);
        let roll: f64 = draw.random();
        let asks = draw.random_bool(0.5);
        let wait = spec.retry_after.mul_f64(draw.random_range(0.0..=1.0));
        let flap = match spec.states {
            States::Flapping(p) => draw.random_bool(p).then(|| draw.random_range(0..=1)),
            _ => None,
        };
        rng.set(Some(draw));
        if hang {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(latency).await;
        let now = self.origin.elapsed();
        let down = spec
            .outages
            .iter()
            .any(|(from, to)| (*from..*to).contains(&now));
        let mut p = roll;
        let mut take = |share: f64| {
            p -= share;
            p < 0.0
        };
        let result = match arrival {
            Some((false, _, _, reset)) => Err(SimError::Throttled(reset)),
            _ if down => Err(SimError::Transient(None)),
            _ if take(spec.p_throttle) => Err(SimError::Throttled(wait)),
            _ if take(spec.p_transient) => Err(SimError::Transient(asks.then_some(wait))),
            _ if take(spec.p_permanent) => Err(SimError::Permanent),
            _ if take(spec.p_moves_on) => Err(SimError::MovesOn),
            _ => Ok(latency.as_millis() as u32),
        };
        let stated = match (arrival, flap) {
            (_, Some(flapped)) => Some((
                flapped,
                0,
                arrival.map_or(Duration::from_secs(1), |(.., until)| until),
            )),
            (Some((_, limit, remaining, until)), None) => Some((limit, remaining, until)),
            (None, None) => None,
        };
        let stated = stated.filter(|_| spec.states != States::Silent);
        if let Some((limit, remaining, until)) = stated {
            operation::report_limits(ProviderLimits {
                requests: Some(Quota {
                    limit: Some(limit),
                    remaining,
                    reset: until,
                    window: None,
                }),
                tokens: Some(Quota {
                    limit: Some(limit * TOKENS_PER_CALL),
                    remaining: remaining * TOKENS_PER_CALL,
                    reset: until,
                    window: None,
                }),
            });
        }
        Answer { result, stated }
    }
}
