//! A plan's declarations built through the builder, as the macro builds them, each
//! instance's with its listeners and its share of the store.

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use resil_runtime::events::Listener;
use resil_runtime::shared::InMemory;
use resil_runtime::{
    Breaker, BreakerConfig, BreakerState, Bulkhead, ConfigError, Keyed, Policy, PolicyBuilder,
    Tuning,
};

use crate::check::Checker;
use crate::ear::{Ear, Heards, Panics};
use crate::plan::{Plan, RateSpec, SharedSpec, Spec, TARGETS};

/// A policy, keyed or not, as its declaration needs.
pub(crate) enum Pol {
    Plain(Policy),
    Keyed(Policy<Keyed>),
}

/// Where a policy's state is shared.
type Sharing<'a> = Option<(&'a InMemory, SharedSpec)>;

fn common<K>(builder: PolicyBuilder<K>, spec: &Spec, seed: u64) -> PolicyBuilder<K> {
    let mut builder = builder.retry(spec.retry).jitter(spec.jitter).seed(seed);
    if let Some(timeout) = spec.timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(deadline) = spec.deadline {
        builder = builder.deadline(deadline);
    }
    if let Some(longest) = spec.retry_after_max {
        builder = builder.retry_after_max(longest);
    }
    if let Some((base, cap)) = spec.backoff {
        builder = builder.backoff(base, cap);
    }
    if let Some((count, delay)) = spec.hedge {
        builder = builder.hedge(count, delay);
    }
    if let Some((ratio, min)) = spec.budget {
        builder = builder.retry_budget(ratio, min);
    }
    if let Some(idle) = spec.idle {
        builder = builder.idle_timeout(idle);
    }
    if let Some(bulkhead) = &spec.bulkhead {
        builder = if bulkhead.adaptive {
            builder.bulkhead_adaptive(bulkhead.limit.0, bulkhead.limit.1)
        } else {
            builder.bulkhead(bulkhead.limit.0)
        };
        if bulkhead.queue > 0 {
            builder = builder.bulkhead_queue(bulkhead.queue);
        }
    }
    let rate = [PolicyBuilder::rate_learn, PolicyBuilder::rate_exact];
    builder = gate(builder, spec.rate.as_ref(), PolicyBuilder::rate, rate);
    let tokens = [
        PolicyBuilder::token_rate_learn,
        PolicyBuilder::token_rate_exact,
    ];
    builder = gate(
        builder,
        spec.tokens.as_ref(),
        PolicyBuilder::token_rate,
        tokens,
    );
    if spec.turns.priority {
        builder = builder.by_priority();
    }
    if spec.turns.fair {
        builder = builder.fair();
    }
    if let Some(percent) = spec.turns.batch_share {
        builder = builder.rate_batch_share(percent);
    }
    builder.independent(spec.independent)
}

/// A rate or token gate as `spec` declares it, through the builder's calls for that gate: its
/// figures, then whether it learns and whether it is exact.
fn gate<K>(
    mut builder: PolicyBuilder<K>,
    spec: Option<&RateSpec>,
    figures: fn(PolicyBuilder<K>, u64, Duration, u64) -> PolicyBuilder<K>,
    [learn, exact]: [fn(PolicyBuilder<K>) -> PolicyBuilder<K>; 2],
) -> PolicyBuilder<K> {
    let Some(spec) = spec else {
        return builder;
    };
    if let Some((count, period, burst)) = spec.declared {
        builder = figures(builder, count, period, burst);
    }
    if spec.learn {
        builder = learn(builder);
    }
    if spec.exact {
        builder = exact(builder);
    }
    builder
}

fn sharing<K>(builder: PolicyBuilder<K>, shared: Sharing<'_>) -> PolicyBuilder<K> {
    match shared {
        Some((store, spec)) => builder
            .shared_in(store)
            .shared_timeout(spec.timeout)
            .shared_fail_closed(spec.fail_closed),
        None => builder,
    }
}

/// Builds a declaration through the builder, as the macro does.
pub(crate) fn build(
    spec: &Spec,
    name: &str,
    seed: u64,
    listener: Option<Arc<dyn Listener>>,
    shared: Sharing<'_>,
) -> Result<Pol, ConfigError> {
    let mut builder = common(Policy::builder().name(name), spec, seed);
    if let Some(listener) = listener {
        builder = builder.listener(listener);
    }
    let breaker = spec.breaker.as_ref();
    if let Some(breaker) = breaker.filter(|b| !b.per_key) {
        let config =
            BreakerConfig::new(breaker.threshold, breaker.cooldown)?.with_kind(breaker.kind)?;
        builder = builder.breaker(Arc::new(Breaker::new(format!("{name}.breaker"), config)));
    }
    if !spec.keyed() {
        return sharing(builder, shared).build().map(Pol::Plain);
    }
    let mut keyed = builder.keyed("model");
    if let Some(breaker) = breaker.filter(|b| b.per_key) {
        keyed = keyed
            .breaker_per_key("model", breaker.threshold, breaker.cooldown)
            .breaker_kind(breaker.kind);
    }
    if spec.bulkhead.as_ref().is_some_and(|b| b.per_key) {
        keyed = keyed.bulkhead_per_key();
    }
    if spec.rate.as_ref().is_some_and(|r| r.per_key) {
        keyed = keyed.rate_per_key();
    }
    if spec.tokens.as_ref().is_some_and(|r| r.per_key) {
        keyed = keyed.token_rate_per_key();
    }
    if let Some(most) = spec.max_keys {
        keyed = keyed.max_keys(most);
    }
    sharing(keyed, shared).build().map(Pol::Keyed)
}

impl Pol {
    pub(crate) fn worst_case(&self) -> Option<Duration> {
        match self {
            Pol::Plain(policy) => policy.worst_case(),
            Pol::Keyed(policy) => policy.worst_case(),
        }
    }

    pub(crate) fn tuning(&self) -> Tuning {
        match self {
            Pol::Plain(policy) => policy.tuning(),
            Pol::Keyed(policy) => policy.tuning(),
        }
    }

    pub(crate) fn set_tuning(&self, tuning: Tuning) -> Result<(), ConfigError> {
        match self {
            Pol::Plain(policy) => policy.set_tuning(tuning),
            Pol::Keyed(policy) => policy.set_tuning(tuning),
        }
    }

    /// Checks that it holds nothing at quiescence: no bulkhead place or waiter, no breaker
    /// probe out, its own and each target's.
    pub(crate) fn quiescent(&self, targets: usize, label: &str, checker: &mut Checker) {
        let mut look = |scope: &str, bulkhead: Option<&Bulkhead>, breaker: Option<&Breaker>| {
            if let Some(bulkhead) = bulkhead {
                let (in_flight, waiting) = (bulkhead.in_flight(), bulkhead.waiting());
                checker.held(in_flight == 0 && waiting == 0, || {
                    format!("{label}{scope}: bulkhead holds {in_flight} places and {waiting} waiters with no call left")
                });
            }
            if let Some(breaker) = breaker {
                // Half-open with no call left: its probe must be free to take.
                let free = breaker.state() != BreakerState::HalfOpen
                    || breaker.admit().now_or_never().is_some();
                checker.held(free, || {
                    format!(
                        "{label}{scope}: breaker {} half-open with its probe out and no call left",
                        breaker.name()
                    )
                });
            }
        };
        match self {
            Pol::Plain(policy) => look("", policy.bulkhead(), policy.breaker().map(|b| &**b)),
            Pol::Keyed(policy) => {
                look("", policy.bulkhead(), policy.breaker().map(|b| &**b));
                if let Some(keys) = policy.keys() {
                    for target in &TARGETS[..targets] {
                        let scope = keys.get(*target);
                        look(&format!(" {target}"), scope.bulkhead(), scope.breaker());
                    }
                }
            }
        }
    }
}

/// Builds the instances' policies (every one must build).
pub(crate) fn policies(
    plan: &Plan,
    stores: &[InMemory],
    heard: &Heards,
    panics: &Panics,
) -> Result<Vec<(Pol, Pol)>, ConfigError> {
    (0..plan.instances())
        .map(|instance| {
            let ear = |which: u8| -> Arc<dyn Listener> {
                Arc::new(Ear {
                    instance,
                    which,
                    heard: heard.clone(),
                    panics: panics.clone(),
                    counted: AtomicU32::new(0),
                })
            };
            let shared = plan
                .shared
                .map(|spec| (&stores[plan.handle_of[instance]], spec));
            let seed = plan.seed ^ (instance as u64) << 32;
            let name = format!("sim{}", plan.seed);
            let outer = build(
                &plan.outer,
                &format!("{name}.outer"),
                seed,
                Some(ear(0)),
                shared,
            )?;
            let inner = build(
                &plan.inner,
                &format!("{name}.inner"),
                seed + 1,
                Some(ear(1)),
                shared,
            )?;
            Ok((outer, inner))
        })
        .collect()
}

/// Whether every declaration of the plan builds.
pub(crate) fn builds(plan: &Plan) -> Result<(), ConfigError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let store = InMemory::new();
        let stores: Vec<_> = (0..plan.instances()).map(|_| store.instance()).collect();
        policies(plan, &stores, &Arc::default(), &None).map(|_| ())
    })
}
