//! What changes under the calls while they run: the store's faults, and configuration (a
//! policy's tuning set as `config::apply` sets it, some refused for breaking a rule).

use std::rc::Rc;

use resil_runtime::Backoff;
use tokio::time::sleep_until;

use crate::plan::StoreAction;
use crate::world::World;

/// The store's outages, slow spells and partitions, as the plan draws them.
pub(crate) async fn faults(world: Rc<World>) {
    let Some(store) = world.stores.first() else {
        return;
    };
    for (at, action) in world.plan.store.clone() {
        sleep_until(world.origin + at).await;
        let (mut down, mut slow) = world.trouble.get();
        match action {
            StoreAction::Down => down = true,
            StoreAction::Up => down = false,
            StoreAction::Slow => slow = true,
            StoreAction::Fast => slow = false,
            StoreAction::Cut(handle) | StoreAction::Rejoin(handle) => {
                let cut = matches!(action, StoreAction::Cut(_));
                world.stores[handle].set_reachable(!cut);
                let plan = &world.plan;
                let instances: Vec<usize> = (0..plan.instances())
                    .filter(|&instance| plan.handle_of[instance] == handle)
                    .collect();
                let mut checker = world.checker.borrow_mut();
                checker.log(format!("store {action:?}: instances {instances:?}"));
                checker.cut(&instances, cut);
                continue;
            }
        }
        match action {
            StoreAction::Down | StoreAction::Up => store.set_available(!down),
            _ => store.set_slow(slow),
        }
        world.trouble.set((down, slow));
        let mut checker = world.checker.borrow_mut();
        checker.log(format!("store {action:?}"));
        checker.store(down || slow);
    }
}

/// Sets the tunings the plan draws, each checked as it applies or is refused.
pub(crate) async fn retunes(world: Rc<World>) {
    for retune in world.plan.retunes.clone() {
        sleep_until(world.origin + retune.at).await;
        let policy = world.policy(retune.instance, retune.policy);
        let before = policy.tuning();
        let mut tuning = before.clone();
        tuning.enabled = retune.enabled;
        tuning.timeout = retune.timeout;
        tuning.deadline = retune.deadline;
        tuning.idle = retune.idle;
        tuning.retry = retune.retry;
        tuning.retry_after_max = retune.retry_after_max;
        let (base, cap) = retune.backoff;
        if let Ok(backoff) = Backoff::new(base, cap) {
            tuning.backoff = backoff.with_jitter(before.backoff.jitter());
        }
        let refused = policy.set_tuning(tuning.clone()).err();
        let after = policy.tuning();
        world.sync();
        let scope = (retune.instance, retune.policy);
        (world.checker.borrow_mut()).retuned(scope, &before, &tuning, refused, &after);
    }
}
