//! What a world checks once every caller ended: nothing held, every attempt told, and a
//! call to each target after a quiet spell reaches its provider.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::sleep;

use crate::build::Pol;
use crate::plan::TARGETS;
use crate::provider::SimError;
use crate::world::World;

pub(crate) fn quiescence(world: &World) {
    let mut checker = world.checker.borrow_mut();
    checker.log("quiescence: every caller ended");
    checker.all_told();
    checker.in_turn(&world.plan);
    let targets = world.plan.targets.len();
    for (instance, (outer, inner)) in world.policies.iter().enumerate() {
        outer.quiescent(targets, &format!("i{instance} outer"), &mut checker);
        inner.quiescent(targets, &format!("i{instance} inner"), &mut checker);
    }
}

/// After a quiet spell longer than any cooldown, Retry-After or window, with the store up and
/// honest providers, one call per instance and target reaches its provider.
pub(crate) async fn recovery(world: &Rc<World>) {
    if let Some(store) = world.stores.first() {
        store.set_available(true);
        store.set_slow(false);
    }
    for store in &world.stores {
        store.set_reachable(true);
    }
    for provider in &world.providers {
        provider.honest.set(true);
    }
    let spec = &world.plan.outer;
    // The longest Retry-After any of the outer policy's tunings honoured.
    let cap = (world.plan.retunes.iter())
        .filter(|retune| retune.policy == 0)
        .map(|retune| retune.retry_after_max)
        .fold(spec.retry_after_cap(), Duration::max);
    let longest = [
        cap,
        spec.breaker.as_ref().map_or(Duration::ZERO, |b| b.cooldown),
        spec.rate
            .as_ref()
            .and_then(|r| r.declared)
            .map_or(Duration::ZERO, |(_, period, _)| period),
        spec.tokens
            .as_ref()
            .and_then(|r| r.declared)
            .map_or(Duration::ZERO, |(_, period, _)| period),
        Duration::from_secs(60),
    ]
    .into_iter()
    .max()
    .unwrap_or_default();
    let within = cap + Duration::from_secs(1);
    for (instance, (outer, _)) in world.policies.iter().enumerate() {
        for target in &TARGETS[..world.plan.targets.len()] {
            // Quiet before each call, so that no call waits for another's slot.
            sleep(longest * 2 + Duration::from_secs(1)).await;
            world.checker.borrow_mut().log(format!(
                "recovery: i{instance} calls {target} after {:?} of quiet",
                longest * 2
            ));
            let reached = Cell::new(false);
            // Reached when polled: the factory runs before the gates and the breaker.
            let body = || async {
                reached.set(true);
                Ok::<u32, SimError>(0)
            };
            let result = match outer {
                Pol::Plain(policy) => tokio::time::timeout(within, policy.run(body)).await,
                Pol::Keyed(policy) => {
                    tokio::time::timeout(within, policy.run_keyed(*target, body)).await
                }
            };
            world.sync();
            world.checker.borrow_mut().recovers(reached.get(), || {
                format!("i{instance}: no call reached {target} within {within:?} after a quiet spell: {result:?}")
            });
        }
    }
}
