//! One world run on tokio's paused clock: instances with their policies, providers, the
//! store's faults and the callers of a plan, every step checked.

use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use futures::future::{LocalBoxFuture, Shared};
use futures::FutureExt;
use rand::rngs::StdRng;
use rand::SeedableRng;
use resil_runtime::shared::InMemory;
use resil_runtime::{Breaker, BreakerKind, BreakerState, Execution, Operation};
use tokio::task::LocalSet;
use tokio::time::{sleep, sleep_until, Instant};

use crate::build::{policies, Pol};
use crate::changes::{faults, retunes};
use crate::check::{Call, Checker, Failure, INVARIANTS};
use crate::ear::Heards;
use crate::ended::{describe, ended, Ending, BODY_PANIC};
use crate::fallback;
use crate::keys::many_keys;
use crate::metered::Meter;
use crate::plan::{Plan, Spec, TARGETS};
use crate::provider::{Provider, SimError};
use crate::quiescence::{quiescence, recovery};
use crate::streams::stream_call;

/// What a run found.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) exercised: [u64; INVARIANTS.len()],
    pub(crate) failures: Vec<Failure>,
    /// Attempts the providers saw.
    pub(crate) attempts: u64,
}

pub(crate) struct World {
    pub(crate) plan: Plan,
    pub(crate) origin: Instant,
    pub(crate) providers: Vec<Provider>,
    /// Per instance: the outer and the inner policy.
    pub(crate) policies: Vec<(Pol, Pol)>,
    pub(crate) stores: Vec<InMemory>,
    pub(crate) checker: RefCell<Checker>,
    heard: Heards,
    attempts: Cell<u64>,
    /// Whether the store is down, slow.
    pub(crate) trouble: Cell<(bool, bool)>,
    /// The calls callers share, by caller id (cleared when the world ends: they hold it).
    shared_calls: RefCell<BTreeMap<usize, SharedCall>>,
    /// The last tag given to a stream.
    tags: Cell<u64>,
    /// A body panicked already (one does, in a world whose plan says so).
    panicked: Cell<bool>,
}

type SharedCall = Shared<LocalBoxFuture<'static, Result<u32, SimError>>>;

impl World {
    /// A tag for a stream, unique in the world.
    pub(crate) fn tag(&self) -> u64 {
        self.tags.set(self.tags.get() + 1);
        self.tags.get()
    }

    pub(crate) fn sync(&self) {
        let heard = std::mem::take(&mut *self.heard.lock().unwrap_or_else(|p| p.into_inner()));
        let mut checker = self.checker.borrow_mut();
        for (who, at, heard) in heard {
            checker.heard(who, at, heard, self.plan.shared.is_none());
        }
    }

    /// The policy a call at depth `which` goes through: the inner one, or the outer one
    /// again when the plan nests calls in their own policy (a layer calling itself).
    fn policy_of(&self, which: u8) -> u8 {
        if self.plan.nest_same {
            0
        } else {
            which
        }
    }

    /// `instance`'s outer policy (0) or inner one (1).
    pub(crate) fn policy(&self, instance: usize, policy: u8) -> &Pol {
        let (outer, inner) = &self.policies[instance];
        if policy == 0 {
            outer
        } else {
            inner
        }
    }

    /// What `look` sees of the breaker a call to `target` through `policy` of `instance` goes
    /// through, if it has one.
    pub(crate) fn breaker<R>(
        &self,
        instance: usize,
        policy: u8,
        target: usize,
        look: impl FnOnce(&Breaker) -> Option<R>,
    ) -> Option<R> {
        match self.policy(instance, policy) {
            Pol::Plain(policy) => policy.breaker().and_then(|b| look(b)),
            Pol::Keyed(policy) => match policy.breaker() {
                Some(breaker) => look(breaker),
                None => policy
                    .keys()
                    .and_then(|keys| keys.get(TARGETS[target]).breaker().and_then(look)),
            },
        }
    }

    /// The name of the breaker a call to `target` through `policy` of `instance` goes through
    /// and its cooldown left, if it is open and cooling.
    fn cooling(&self, instance: usize, policy: u8, target: usize) -> Option<(String, Duration)> {
        self.breaker(instance, policy, target, |breaker| {
            let left = breaker.retry_in(Instant::now());
            (breaker.state() == BreakerState::Open && !left.is_zero())
                .then(|| (breaker.name().to_owned(), left))
        })
    }

    fn spec(&self, which: u8) -> &Spec {
        self.plan.spec_of(self.policy_of(which))
    }

    fn begin(&self, caller: usize, which: u8, root: Option<usize>) -> usize {
        let plan = &self.plan;
        let spec = self.spec(which);
        let instance = plan.callers[caller].instance;
        let now = Instant::now();
        let policy = self.policy(instance, self.policy_of(which));
        // What the operation reads as it starts (configuration may have changed it since).
        let tuning = policy.tuning();
        let mut deadline = tuning.deadline.map(|deadline| now + deadline);
        // A stream is read past its commit, which is all a worst case bounds.
        let streaming = which == 0 && plan.callers[caller].stream.is_some();
        let mut bound = (policy.worst_case())
            .filter(|_| !streaming)
            .map(|worst| now + worst);
        if let Some(root) = root {
            let checker = self.checker.borrow();
            let (outer_deadline, outer_bound) = checker.limits_of(root);
            deadline = match (deadline, outer_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            bound = match (bound, outer_bound) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.sync();
        self.checker.borrow_mut().begin(Call {
            logical: (plan.callers[caller].id, which),
            instance,
            root: root.map(|root| (root, !spec.independent)),
            retry: tuning.retry,
            retry_after_cap: tuning.retry_after_max,
            enabled: tuning.enabled,
            started: now,
            deadline,
            bound,
            gates: spec.ceilings(),
            cost: if streaming {
                1
            } else {
                plan.callers[caller].cost
            },
            shared: plan.shared.is_some(),
            simple: which == 0
                && plan.callers[caller].nested.is_none()
                && spec.hedge.is_none()
                && !streaming,
            routed: which == 0 && plan.callers[caller].routed,
            policy: self.policy_of(which),
            stream: streaming,
            idle: tuning.idle,
        })
    }

    /// An attempt's body reached `target` (its first poll): checked, and counted.
    pub(crate) fn reached(
        &self,
        caller: usize,
        which: u8,
        index: usize,
        target: usize,
        held: Option<usize>,
    ) {
        let instance = self.plan.callers[caller].instance;
        let operation = Operation::current();
        // An open breaker lets no call through, but a nested call on the breaker its enclosing
        // attempt holds goes through as part of it.
        let policy = self.policy_of(which);
        let per_key = self.spec(which).breaker.as_ref().is_some_and(|b| b.per_key);
        let holds = which == 1 && policy == 0 && (!per_key || held == Some(target));
        // A policy switched off calls straight through: no breaker, no gate.
        let on = self.checker.borrow().enabled(index);
        let open = (on && !holds)
            .then(|| self.cooling(instance, policy, target))
            .flatten();
        let id = operation
            .as_ref()
            .map(|operation| operation.id().to_string());
        let number = operation.as_ref().map(Operation::attempt);
        let slow = match self
            .spec(which)
            .breaker
            .as_ref()
            .map(|breaker| breaker.kind)
        {
            Some(BreakerKind::SlowCall { slower_than, .. }) => Some(slower_than),
            _ => None,
        };
        let breaker = self.breaker(instance, policy, target, |breaker| {
            on.then(|| (breaker.name().to_owned(), slow))
        });
        self.sync();
        self.checker
            .borrow_mut()
            .attempt(index, target, id, number, breaker);
        self.checker.borrow_mut().breaker_open(index, open);
        self.attempts.set(self.attempts.get() + 1);
    }
}

/// One call of a caller through a policy: to one target, or routed.
async fn call(
    world: Rc<World>,
    caller: usize,
    which: u8,
    index: usize,
    rng: Rc<Cell<Option<StdRng>>>,
    held: Option<usize>,
) -> Result<u32, SimError> {
    let plan = &world.plan;
    let spec = &plan.callers[caller];
    let instance = spec.instance;
    let (targets, routed) = if which == 0 {
        (spec.targets.clone(), spec.routed)
    } else {
        (vec![spec.nested.unwrap_or(0)], false)
    };
    let make = |target: usize| {
        attempt(
            world.clone(),
            caller,
            which,
            index,
            target,
            rng.clone(),
            held,
        )
    };
    let of = |name: &str| TARGETS.iter().position(|t| *t == name).unwrap_or(0);
    let policy = world.policy(instance, world.policy_of(which));
    let first = TARGETS[targets[0]];
    let others: Vec<&'static str> = targets[1..].iter().map(|&t| TARGETS[t]).collect();
    // Its class and fair value, which a policy that does not serve in turn ignores, and its
    // cost, which one with no token gate ignores.
    let turn = |execution: &mut Execution<'_, SimError>| {
        execution.set_priority(spec.class);
        execution.set_fair_key(&spec.tenant);
        execution.set_cost(spec.cost);
    };
    if routed {
        let mut route = match policy {
            Pol::Plain(policy) => policy.route(first, others),
            Pol::Keyed(policy) => policy.route(first, others),
        };
        turn(route.execution());
        return route.run(|name| make(of(name))).await;
    }
    let mut execution = match policy {
        Pol::Plain(policy) => policy.execute(),
        Pol::Keyed(policy) => policy.execute_keyed(first),
    };
    turn(&mut execution);
    if which == 0 && plan.outer.fallback {
        return fallback::run(&world, index, execution, || make(targets[0])).await;
    }
    execution.run(|| make(targets[0])).await
}

/// One attempt's body: checked at its start, then the nested call, then the provider.
async fn attempt(
    world: Rc<World>,
    caller: usize,
    which: u8,
    index: usize,
    target: usize,
    rng: Rc<Cell<Option<StdRng>>>,
    held: Option<usize>,
) -> Result<u32, SimError> {
    let nested = world.plan.callers[caller].nested.filter(|_| which == 0);
    world.reached(caller, which, index, target, held);
    if nested.is_some() {
        let inner = world.begin(caller, 1, Some(index));
        let mut ending = Ending {
            world: world.clone(),
            index: inner,
            outcome: None,
        };
        let result = Box::pin(call(
            world.clone(),
            caller,
            1,
            inner,
            rng.clone(),
            Some(target),
        ))
        .await;
        ending.outcome = Some(describe(&result));
        drop(ending);
        result?;
    }
    let joins = world.plan.callers[caller].joins.filter(|_| which == 0);
    let joined = joins.and_then(|id| world.shared_calls.borrow().get(&id).cloned());
    if let Some(joined) = joined {
        let result = joined.await;
        world.sync();
        let line = format!(
            "c{} awaited c{}'s shared call: {}",
            world.plan.callers[caller].id,
            joins.unwrap_or_default(),
            describe(&result)
        );
        world.checker.borrow_mut().log(line);
        return result;
    }
    let answer = world.providers[target].call(&rng).await;
    world.sync();
    world.checker.borrow_mut().answer(index, target, &answer);
    // Once, mid-call: the body's own panic, which reaches its caller.
    if which == 0 && world.plan.callers[caller].panics && !world.panicked.replace(true) {
        if let Some(operation) = Operation::current() {
            world
                .checker
                .borrow_mut()
                .unwinds(operation.id().to_string());
        }
        panic!("{BODY_PANIC}");
    }
    answer.result
}

async fn caller(world: Rc<World>, caller: usize) {
    let spec = &world.plan.callers[caller];
    sleep_until(world.origin + spec.at).await;
    let rng = Rc::new(Cell::new(Some(StdRng::seed_from_u64(spec.seed))));
    let index = world.begin(caller, 0, None);
    let mut ending = Ending {
        world: world.clone(),
        index,
        outcome: None,
    };
    let call = match spec.stream {
        Some(_) => stream_call(world.clone(), caller, index, rng).boxed_local(),
        None => call(world.clone(), caller, 0, index, rng, None).boxed_local(),
    }
    .shared();
    if spec.shares {
        world
            .shared_calls
            .borrow_mut()
            .insert(spec.id, call.clone());
    }
    // A caller with nothing to bound its wait gives up after ten minutes.
    let unbounded = world.checker.borrow().limits_of(index) == (None, None);
    let drop_after = spec
        .drop_after
        .or(unbounded.then_some(Duration::from_secs(600)));
    let call = AssertUnwindSafe(call).catch_unwind();
    let outcome = match drop_after {
        Some(after) => {
            tokio::select! {
                biased;
                result = call => ended(result),
                () = sleep(after) => format!("dropped by its caller after {after:?}"),
            }
        }
        None => ended(call.await),
    };
    ending.outcome = Some(outcome);
}

/// Runs the plan with only the callers `only` says (all when `None`).
pub(crate) fn run(plan: &Plan) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let local = LocalSet::new();
    // The world's thread alone reports to this recorder.
    let meter = Meter::new();
    let _recorder = metrics::set_default_local_recorder(&meter.recorder);
    local.block_on(&runtime, async {
        let origin = Instant::now();
        let store = InMemory::new();
        let stores: Vec<_> = (0..plan.instances())
            .map(|index| {
                if index == 0 {
                    store.clone()
                } else {
                    store.instance()
                }
            })
            .collect();
        let heard = Arc::default();
        let panics = plan
            .listener_panics
            .map(|every| (every, Arc::new(AtomicBool::new(true))));
        let policies =
            policies(plan, &stores, &heard, &panics).expect("the plan's declarations build");
        let world = Rc::new(World {
            plan: plan.clone(),
            origin,
            providers: plan
                .targets
                .iter()
                .map(|spec| Provider::new(spec.clone(), origin))
                .collect(),
            policies,
            stores,
            // A listener's panic at a start leaves a first attempt the budget counted and no
            // body saw: its budget is checked where listeners do not panic.
            checker: RefCell::new(Checker::new(
                origin,
                match plan.listener_panics {
                    None => [plan.outer.budget, plan.inner.budget],
                    Some(_) => [None, None],
                },
            )),
            heard,
            attempts: Cell::new(0),
            trouble: Cell::new((false, false)),
            shared_calls: RefCell::default(),
            tags: Cell::new(0),
            panicked: Cell::new(false),
        });
        let store_task = tokio::task::spawn_local(faults(world.clone()));
        let retune_task = tokio::task::spawn_local(retunes(world.clone()));
        let callers: Vec<_> = (0..plan.callers.len())
            .map(|index| tokio::task::spawn_local(caller(world.clone(), index)))
            .collect();
        // Every caller's bound is at most its start plus ten minutes of waiting.
        let last = plan.callers.iter().map(|c| c.at).max().unwrap_or_default();
        let limit = origin + last + Duration::from_secs(3_600);
        let all = futures::future::join_all(callers);
        if tokio::time::timeout_at(limit, all).await.is_err() {
            world.sync();
            world.checker.borrow_mut().unended();
        }
        store_task.abort();
        retune_task.abort();
        if let Some((_, on)) = &panics {
            on.store(false, Ordering::Relaxed);
        }
        world.shared_calls.borrow_mut().clear();
        world.sync();
        quiescence(&world);
        world.checker.borrow_mut().metered(&meter.counted());
        recovery(&world).await;
        many_keys(&world).await;
        world.sync();
        let checker = world.checker.borrow();
        Outcome {
            exercised: checker.exercised,
            failures: checker.failures.clone(),
            attempts: world.attempts.get(),
        }
    })
}
