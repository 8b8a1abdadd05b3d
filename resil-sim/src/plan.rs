//! A world drawn from a seed: its instances, targets, declarations, store faults and callers.
//! Everything here is data; `world.rs` runs it.

mod callers;
mod draws;

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resil_runtime::{BreakerKind, Jitter, Priority};

use callers::callers;
use draws::{draw_turns, retunes, spec, stream_shape, target, tokens};

/// The targets' names (a route's keys).
pub(crate) const TARGETS: [&str; 3] = ["gpt", "claude", "mini"];

/// The tokens a provider states for each request it allows.
pub(crate) const TOKENS_PER_CALL: u64 = 100;

/// Arrivals fall within this much virtual time.
const HORIZON: Duration = Duration::from_secs(90);

#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    /// Which store handle each instance's policies use: two instances on one handle are two
    /// policies of one process sharing a gate.
    pub(crate) handle_of: Vec<usize>,
    pub(crate) targets: Vec<TargetSpec>,
    pub(crate) outer: Spec,
    /// The policy of the calls nested in an outer call's body, if any caller nests.
    pub(crate) inner: Spec,
    /// Nested calls go through the outer policy again (its breakers, gates and bulkheads).
    pub(crate) nest_same: bool,
    pub(crate) shared: Option<SharedSpec>,
    pub(crate) store: Vec<(Duration, StoreAction)>,
    pub(crate) callers: Vec<Caller>,
    /// The listeners panic on every n-th attempt start or wait each hears.
    pub(crate) listener_panics: Option<u32>,
    /// Tunings set while calls run, in order.
    pub(crate) retunes: Vec<Retune>,
    /// Many keys through the outer declaration once the world is quiet, if it is keyed.
    pub(crate) many_keys: Option<ManyKeys>,
}

/// How many keys, and the most a policy keeps (its `max_keys`, the default when none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ManyKeys {
    pub(crate) count: usize,
    pub(crate) max_keys: Option<usize>,
}

impl Plan {
    pub(crate) fn instances(&self) -> usize {
        self.handle_of.len()
    }

    /// The declaration of policy `which` (0 outer, 1 inner).
    pub(crate) fn spec_of(&self, which: u8) -> &Spec {
        if which == 0 {
            &self.outer
        } else {
            &self.inner
        }
    }
}

/// One simulated provider.
#[derive(Debug, Clone)]
pub(crate) struct TargetSpec {
    /// The scale of its latency; the tail is Pareto with index `tail`.
    pub(crate) latency: Duration,
    pub(crate) tail: f64,
    pub(crate) p_transient: f64,
    pub(crate) p_permanent: f64,
    pub(crate) p_moves_on: f64,
    pub(crate) p_throttle: f64,
    pub(crate) p_hang: f64,
    /// The longest Retry-After its errors ask for (a throttle always asks, a transient error
    /// sometimes).
    pub(crate) retry_after: Duration,
    /// What it serves per fixed window; past it, 429 until the window resets.
    pub(crate) capacity: Option<(u64, Duration)>,
    pub(crate) states: States,
    /// Periods (from, to) in which every answer is a transient error.
    pub(crate) outages: Vec<(Duration, Duration)>,
    /// What its streams do once connected.
    pub(crate) stream: StreamShape,
}

/// How a provider's streams behave once connected: items a gap apart, the first `headers`
/// without content; each stream may stall, be cut by an error, end before its final item,
/// linger after it (the connection held open) or flood (every item at once).
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamShape {
    pub(crate) items: u32,
    pub(crate) headers: u32,
    pub(crate) gap: Duration,
    pub(crate) p_stall: f64,
    pub(crate) p_cut: f64,
    pub(crate) p_short: f64,
    pub(crate) p_linger: f64,
    pub(crate) p_flood: f64,
}

/// What a provider's answers say of its limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum States {
    Silent,
    Honest,
    /// Honest, but an answer says `limit 0` or `limit 1`, nothing left, with this probability.
    Flapping(f64),
}

/// A declaration, drawn from the space the builder accepts.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) retry: u32,
    pub(crate) retry_after_max: Option<Duration>,
    pub(crate) backoff: Option<(Duration, Duration)>,
    pub(crate) jitter: Jitter,
    pub(crate) breaker: Option<BreakerSpec>,
    pub(crate) bulkhead: Option<BulkheadSpec>,
    pub(crate) rate: Option<RateSpec>,
    /// The token gate, its figures in units of cost.
    pub(crate) tokens: Option<RateSpec>,
    pub(crate) hedge: Option<(u32, Duration)>,
    pub(crate) budget: Option<(f64, f64)>,
    pub(crate) independent: bool,
    /// Waiters served by priority, in turn across `fair` values, with a batch share.
    pub(crate) turns: Turns,
    /// The longest gap between a committed stream's items.
    pub(crate) idle: Option<Duration>,
    /// The most keys kept, if not the default.
    pub(crate) max_keys: Option<usize>,
    /// A `fallback` serves its failures (the outer declaration's, for calls not routed).
    pub(crate) fallback: bool,
}

/// How a declaration serves the callers that wait (`priority`, `fair`, `batch N%`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Turns {
    pub(crate) priority: bool,
    pub(crate) fair: bool,
    pub(crate) batch_share: Option<u8>,
}

#[derive(Debug, Clone)]
pub(crate) struct BreakerSpec {
    pub(crate) threshold: u32,
    pub(crate) cooldown: Duration,
    pub(crate) kind: BreakerKind,
    pub(crate) per_key: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct BulkheadSpec {
    /// (min, max) for an adaptive one, (limit, limit) for a fixed one.
    pub(crate) limit: (usize, usize),
    pub(crate) adaptive: bool,
    pub(crate) queue: usize,
    pub(crate) per_key: bool,
}

/// A gate's declared ceiling: at most `units` start in any window of `period` (count +
/// burst - 1; units of cost for the token gate).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ceiling {
    pub(crate) tokens: bool,
    pub(crate) units: u64,
    pub(crate) period: Duration,
    pub(crate) per_key: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct RateSpec {
    /// (count, period, burst); none for `rate = "auto"`.
    pub(crate) declared: Option<(u64, Duration, u64)>,
    pub(crate) learn: bool,
    pub(crate) exact: bool,
    pub(crate) per_key: bool,
}

impl Spec {
    /// Whether the policy is keyed (something per key).
    pub(crate) fn keyed(&self) -> bool {
        self.breaker.as_ref().is_some_and(|b| b.per_key)
            || self.bulkhead.as_ref().is_some_and(|b| b.per_key)
            || self.rate.as_ref().is_some_and(|r| r.per_key)
            || self.tokens.as_ref().is_some_and(|r| r.per_key)
    }

    /// The longest Retry-After honoured.
    pub(crate) fn retry_after_cap(&self) -> Duration {
        self.retry_after_max.unwrap_or(Duration::from_secs(60))
    }

    /// The gates with a declared ceiling: the request gate's, then the token gate's.
    pub(crate) fn ceilings(&self) -> Vec<Ceiling> {
        [(&self.rate, false), (&self.tokens, true)]
            .into_iter()
            .filter_map(|(gate, tokens)| {
                let gate = gate.as_ref()?;
                let (count, period, burst) = gate.declared?;
                Some(Ceiling {
                    tokens,
                    units: count + burst - 1,
                    period,
                    per_key: gate.per_key,
                })
            })
            .collect()
    }
}

/// A policy's tuning set at run time (`Policy::set_tuning`, what configuration does): its
/// numbers drawn as a declaration's are, some breaking a rule, so that the policy refuses them.
#[derive(Debug, Clone)]
pub(crate) struct Retune {
    pub(crate) at: Duration,
    pub(crate) instance: usize,
    /// 0 outer, 1 inner.
    pub(crate) policy: u8,
    pub(crate) enabled: bool,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) idle: Option<Duration>,
    pub(crate) retry: u32,
    pub(crate) retry_after_max: Duration,
    pub(crate) backoff: (Duration, Duration),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SharedSpec {
    pub(crate) timeout: Duration,
    pub(crate) fail_closed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreAction {
    Down,
    Up,
    Slow,
    Fast,
    /// The instances on this store handle (a process) are cut off from the store, or reach
    /// it again: a partition.
    Cut(usize),
    Rejoin(usize),
}

#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// Its index in the plan as drawn (kept when a shrink drops others).
    pub(crate) id: usize,
    pub(crate) at: Duration,
    pub(crate) instance: usize,
    /// The first target, then the others of a route (none: a call to one target).
    pub(crate) targets: Vec<usize>,
    pub(crate) routed: bool,
    /// The caller stops waiting (drops its future) after this long.
    pub(crate) drop_after: Option<Duration>,
    /// A call to this target nested in each attempt's body.
    pub(crate) nested: Option<usize>,
    /// Its call is shared (`futures::future::Shared`) for a later caller to await.
    pub(crate) shares: bool,
    /// Its body awaits the shared call of this caller (by id), when it is still there.
    pub(crate) joins: Option<usize>,
    /// The seed of the provider's draws for this caller's attempts.
    pub(crate) seed: u64,
    /// Its class and `fair` value, where its policy serves waiters in turn.
    pub(crate) class: Priority,
    pub(crate) tenant: u8,
    /// Its call streams, committing at the first item with content (`true`) or at the first.
    pub(crate) stream: Option<bool>,
    /// What each of its attempts costs a token gate (a stream's, 1: it has no way to say).
    pub(crate) cost: u64,
    /// Its body panics mid-call, at its first attempt (the first such in the world only).
    pub(crate) panics: bool,
}

pub(super) fn ms(rng: &mut StdRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(rng.random_range(low..=high))
}

/// A duration spread over several orders of magnitude between `low` and `high` ms.
pub(super) fn log_ms(rng: &mut StdRng, low: u64, high: u64) -> Duration {
    let (low, high) = ((low as f64).ln(), (high as f64).ln());
    Duration::from_millis(rng.random_range(low..=high).exp() as u64)
}

impl Plan {
    /// The plan of `seed`; `redraw` > 0 when the earlier draws had a declaration `build`
    /// refused.
    pub(crate) fn draw(seed: u64, redraw: u64) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ redraw);
        let targets = (0..rng.random_range(1..=3))
            .map(|_| target(&mut rng))
            .collect::<Vec<_>>();
        let outer = spec(&mut rng);
        let inner = spec(&mut rng);
        let instances = rng.random_range(1..=3);
        let shared = rng.random_bool(0.35).then(|| SharedSpec {
            timeout: ms(&mut rng, 5, 100),
            fail_closed: rng.random_bool(0.2),
        });
        let handle_of: Vec<usize> = (0..instances)
            .map(|instance| {
                if instance > 0 && rng.random_bool(0.25) {
                    instance - 1
                } else {
                    instance
                }
            })
            .collect();
        let store = if shared.is_some() {
            store_faults(&mut rng)
        } else {
            Vec::new()
        };
        let mut callers = callers(&mut rng, instances, targets.len());
        let nest_same = rng.random_bool(0.3);
        // Drawn apart, so that the draws above, and the worlds of earlier seeds, stay as they were.
        let mut turns = StdRng::seed_from_u64(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ redraw);
        let mut outer = outer;
        let mut inner = inner;
        outer.turns = draw_turns(&mut turns, &outer);
        inner.turns = draw_turns(&mut turns, &inner);
        for caller in &mut callers {
            caller.class = match turns.random_range(0..10) {
                0..=1 => Priority::Critical,
                2..=5 => Priority::Default,
                _ => Priority::Batch,
            };
            caller.tenant = turns.random_range(0..4);
        }
        // Streams, drawn apart too.
        let mut streams = StdRng::seed_from_u64(seed.wrapping_mul(0xA076_1D64_78BD_642F) ^ redraw);
        let mut targets = targets;
        for target in &mut targets {
            target.stream = stream_shape(&mut streams);
        }
        outer.idle = streams
            .random_bool(0.6)
            .then(|| log_ms(&mut streams, 5, 10_000));
        let streaming = streams.random_bool(0.4);
        for caller in callers
            .iter_mut()
            .filter(|c| !c.shares && c.joins.is_none() && c.nested.is_none())
        {
            if streaming && streams.random_bool(0.3) {
                caller.stream = Some(streams.random_bool(0.5));
            }
        }
        // Panics, drawn apart as well: a body's, or every n-th start or wait a listener hears.
        let mut panics = StdRng::seed_from_u64(seed.wrapping_mul(0xE703_7ED1_A0B4_28DB) ^ redraw);
        for caller in &mut callers {
            caller.panics = caller.stream.is_none() && panics.random_bool(0.02);
        }
        let listener_panics = panics
            .random_bool(0.1)
            .then(|| panics.random_range(20..=500));
        // Tunings set at run time, and many keys, drawn apart too.
        let mut later = StdRng::seed_from_u64(seed.wrapping_mul(0x8EBC_6AF0_9C88_C6E3) ^ redraw);
        let retunes = retunes(&mut later, instances);
        let many_keys = (outer.keyed() && later.random_bool(0.2)).then(|| {
            let count = later.random_range(16..=64);
            ManyKeys {
                count,
                max_keys: later
                    .random_bool(0.5)
                    .then(|| later.random_range(1..=count)),
            }
        });
        // Token gates and what each call costs them, drawn apart too.
        let mut costs = StdRng::seed_from_u64(seed.wrapping_mul(0x5851_F42D_4C95_7F2D) ^ redraw);
        outer.tokens = tokens(&mut costs);
        inner.tokens = tokens(&mut costs);
        // The most a call may cost: a declared burst, or what providers state.
        let most = [&outer, &inner]
            .map(
                |spec| match spec.tokens.as_ref().map(|tokens| tokens.declared) {
                    None => 1,
                    Some(None) => TOKENS_PER_CALL,
                    Some(Some((.., burst))) => burst,
                },
            )
            .into_iter()
            .max()
            .unwrap_or(1);
        for caller in callers.iter_mut().filter(|c| c.stream.is_none()) {
            // Now and then more than a burst, which no gate can ever let pass.
            caller.cost = costs.random_range(1..=most + most / 8);
        }
        // A fallback, drawn apart too, where the attempts run one by one (no hedge).
        let mut served = StdRng::seed_from_u64(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ redraw);
        outer.fallback = outer.hedge.is_none() && served.random_bool(0.3);
        let mut store = store;
        if shared.is_some() {
            store.extend(partitions(&mut later, &handle_of));
            store.sort_by_key(|(at, _)| *at);
        }
        Plan {
            nest_same,
            seed,
            handle_of,
            targets,
            outer,
            inner,
            shared,
            store,
            callers,
            listener_panics,
            retunes,
            many_keys,
        }
    }
}

/// Outages and slow spells of the store, some long, some flapping every few milliseconds.
fn store_faults(rng: &mut StdRng) -> Vec<(Duration, StoreAction)> {
    let mut actions = Vec::new();
    for _ in 0..rng.random_range(0..=3) {
        let at = ms(rng, 0, HORIZON.as_millis() as u64);
        let slow = rng.random_bool(0.3);
        let (off, on) = if slow {
            (StoreAction::Slow, StoreAction::Fast)
        } else {
            (StoreAction::Down, StoreAction::Up)
        };
        let flapping = rng.random_bool(0.5);
        spell(rng, at, (off, on), flapping, &mut actions);
    }
    actions.sort_by_key(|(at, _)| *at);
    actions
}

/// `off` at `at`, then `on` 50 ms to 30 s later; or, `flapping`, off and on every 7 to 23 ms
/// for 100 ms to 5 s.
fn spell(
    rng: &mut StdRng,
    mut at: Duration,
    (off, on): (StoreAction, StoreAction),
    flapping: bool,
    actions: &mut Vec<(Duration, StoreAction)>,
) {
    if !flapping {
        actions.push((at, off));
        actions.push((at + log_ms(rng, 50, 30_000), on));
        return;
    }
    let until = at + log_ms(rng, 100, 5_000);
    while at < until {
        actions.push((at, off));
        at += ms(rng, 7, 23);
        actions.push((at, on));
        at += ms(rng, 7, 23);
    }
}

/// In a third of the worlds with two processes or more, one or two partitions, each cutting
/// one process off from the store for a while, or flapping every 7 to 23 ms.
fn partitions(rng: &mut StdRng, handle_of: &[usize]) -> Vec<(Duration, StoreAction)> {
    let mut handles = handle_of.to_vec();
    handles.dedup();
    if handles.len() < 2 || !rng.random_bool(0.35) {
        return Vec::new();
    }
    let mut actions = Vec::new();
    for _ in 0..rng.random_range(1..=2) {
        let handle = handles[rng.random_range(0..handles.len())];
        let cut = (StoreAction::Cut(handle), StoreAction::Rejoin(handle));
        let at = ms(rng, 0, HORIZON.as_millis() as u64);
        let flapping = rng.random_bool(0.3);
        spell(rng, at, cut, flapping, &mut actions);
    }
    actions
}
