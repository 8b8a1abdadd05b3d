//! The callers of a world: bursts, a steady stream per instance, some sharing their call.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use resil_runtime::Priority;

use super::{log_ms, ms, Caller, HORIZON};

/// One caller at `at` on `instance`.
fn caller(rng: &mut StdRng, at: Duration, instance: usize, targets: usize) -> Caller {
    let routed = targets > 1 && rng.random_bool(0.5);
    let first = rng.random_range(0..targets);
    let mut route = vec![first];
    if routed {
        route.extend((0..targets).filter(|&t| t != first));
    }
    Caller {
        id: 0,
        at,
        instance,
        targets: route,
        routed,
        drop_after: rng.random_bool(0.2).then(|| log_ms(rng, 1, 30_000)),
        nested: rng.random_bool(0.15).then(|| rng.random_range(0..targets)),
        shares: false,
        joins: None,
        seed: rng.random(),
        class: Priority::Default,
        tenant: 0,
        stream: None,
        cost: 1,
        panics: false,
    }
}

/// Callers arriving in bursts, sometimes beside a steady stream per instance (which
/// saturates gates); some await, in their body, a call another caller shares.
pub(super) fn callers(rng: &mut StdRng, instances: usize, targets: usize) -> Vec<Caller> {
    let mut callers = Vec::new();
    for _ in 0..rng.random_range(1..=8) {
        let at = ms(rng, 0, HORIZON.as_millis() as u64);
        let spread = log_ms(rng, 1, 5_000);
        for _ in 0..rng.random_range(1..=25) {
            let at = at + ms(rng, 0, spread.as_millis() as u64);
            let instance = rng.random_range(0..instances);
            callers.push(caller(rng, at, instance, targets));
        }
    }
    if rng.random_bool(0.3) {
        let from = ms(rng, 0, 30_000);
        let length = ms(rng, 10_000, 60_000);
        for instance in 0..instances {
            let every = log_ms(rng, 10, 500).max(length / 400);
            let mut at = from;
            while at < from + length {
                callers.push(caller(rng, at, instance, targets));
                at += every;
            }
        }
    }
    callers.sort_by_key(|caller| caller.at);
    for (id, caller) in callers.iter_mut().enumerate() {
        caller.id = id;
    }
    // Request coalescing: a caller's body awaits the call of one who came shortly before.
    for index in 1..callers.len() {
        if rng.random_bool(0.05) && callers[index].nested.is_none() {
            let earlier = rng.random_range(index.saturating_sub(5)..index);
            if callers[earlier].joins.is_none() && callers[earlier].nested.is_none() {
                callers[earlier].shares = true;
                callers[index].joins = Some(callers[earlier].id);
            }
        }
    }
    callers
}
