//! Many keys through a keyed declaration, once the world is quiet: names short, past 256
//! bytes, of many scripts or of control characters, each called twice at once and answered as
//! its provider answers. No more keys are kept than `max_keys`, and each keeps no more bytes
//! than `Keys` documents, whatever its name and its history (the bytes of a policy not
//! shared: a shared one's would count the store's).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resil_runtime::{Keyed, KeyedBreakers, Keys, Policy};

use crate::build::{build, Pol};
use crate::counting::live_bytes;
use crate::plan::Turns;
use crate::world::World;

/// What the key map's reclaimer (papaya's, seize) keeps for this thread once it forgets a
/// first key, whatever the keys: not theirs. Its size varies with the run (one world, seed
/// 47404, kept 1 336 bytes more in CI than alone).
const RECLAIMER: i64 = 2_048;

/// A key's name: distinct by its number, hostile by its draw.
fn name(number: usize, rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => format!("k{number}"),
        1 => format!("{number}:{}", "x".repeat(rng.random_range(200..=8_192))),
        2 => format!("{number}:{}", "é🦀ש".repeat(rng.random_range(1..=800))),
        _ => format!("{number}\n\0\"=,{{}} \u{202e}"),
    }
}

/// One call with the key `name` to the provider `target`, given up after ten minutes.
async fn one(
    policy: &Policy<Keyed>,
    world: &World,
    draws: &Rc<Cell<Option<StdRng>>>,
    name: &str,
    target: usize,
) {
    let body = || {
        let draws = draws.clone();
        async move { world.providers[target].call(&draws).await.result }
    };
    let _ = tokio::time::timeout(Duration::from_secs(600), policy.run_keyed(name, body)).await;
}

/// Runs the keys the plan draws, if any, through a policy of the outer declaration.
pub(crate) async fn many_keys(world: &Rc<World>) {
    let plan = &world.plan;
    let Some(many) = plan.many_keys else {
        return;
    };
    let mut spec = plan.outer.clone();
    spec.max_keys = many.max_keys;
    // What all calls share is the policy's, not its keys' (a learning gate's book grows as
    // it books): left out, so that what the policy keeps is its keys'.
    spec.breaker = spec.breaker.filter(|breaker| breaker.per_key);
    spec.bulkhead = spec.bulkhead.filter(|bulkhead| bulkhead.per_key);
    spec.rate = spec.rate.filter(|rate| rate.per_key);
    spec.tokens = spec.tokens.filter(|tokens| tokens.per_key);
    spec.turns.batch_share = None;
    if spec.rate.is_none() && spec.bulkhead.as_ref().is_none_or(|b| b.queue == 0) {
        spec.turns = Turns::default();
    }
    let shared = plan.shared.map(|shared| (&world.stores[0], shared));
    let seed = plan.seed ^ 0x6b65_7973;
    // Its metrics go nowhere: a recorder's series per key are not the policy's bytes.
    let _quiet = metrics::set_default_local_recorder(&metrics::NoopRecorder);
    let name_of = format!("sim{}.keys", plan.seed);
    let Ok(Pol::Keyed(policy)) = build(&spec, &name_of, seed, None, shared) else {
        return;
    };
    let Some(keys) = policy.keys() else {
        return;
    };
    for provider in &world.providers {
        provider.honest.set(false);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let names: Vec<String> = (0..many.count).map(|n| name(n, &mut rng)).collect();
    let draws = Rc::new(Cell::new(Some(StdRng::seed_from_u64(seed))));
    let call = |name, target| one(&policy, world, &draws, name, target);
    // What the policy makes at its first call is not a key's: a first key, held in use so
    // that it is never forgotten (its bytes would cancel another's), made before counting.
    call("warm", 0).await;
    let warm = keys.get("warm");
    let before = live_bytes();
    // The bound, and the key in use beyond it (only keys in use may exceed it).
    let most = many.max_keys.unwrap_or(KeyedBreakers::DEFAULT_MAX_KEYS) + 1;
    for (number, name) in names.iter().enumerate() {
        let target = number % world.providers.len();
        futures::future::join(call(name, target), call(name, target)).await;
        world.checker.borrow_mut().keys_kept(keys.len(), most);
    }
    // A shared policy's bytes here would count the store's state, in this process for
    // `InMemory` (expiring as Redis's keys do), not the keys': `tests/alloc.rs` measures it.
    if plan.shared.is_none() {
        let kept = keys.len().saturating_sub(1).max(1);
        let per_key = (live_bytes() - before - RECLAIMER) / kept as i64;
        // A learning gate keeps the slots of the calls that started at once: two calls, and
        // their hedges.
        let learning = [&spec.rate, &spec.tokens]
            .into_iter()
            .filter(|gate| gate.as_ref().is_some_and(|gate| gate.learn))
            .count();
        // The room for them grows by doubling.
        let started =
            (2 * (1 + spec.hedge.map_or(0, |(count, _)| count as usize))).next_power_of_two();
        let bound = Keys::MAX_BYTES_PER_KEY + learning * started * Keys::BYTES_PER_STARTED_SLOT;
        (world.checker.borrow_mut()).key_bytes(per_key, bound, kept);
    }
    drop(warm);
}
