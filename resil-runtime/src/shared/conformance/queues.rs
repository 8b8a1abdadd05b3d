//! A long queue given back in any order gives its gate back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use super::links::{eventually_granted, gate, granted, refused, reserve_in};
use super::{Suite, HOUR};
use crate::seams::{reserve, Alone, GateAsk, SharedSlots};
use crate::shared::IntoSharedStore;

/// Callers waiting in one gate: more than the stretches a store kept given back before (64),
/// fewer than it keeps now.
const QUEUE: usize = 200;

impl<F, Fut, S> Suite<F>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
    S: IntoSharedStore,
{
    /// Every other caller of a queue gives up first (each a stretch of its own, the others
    /// still waiting between them), then the rest from the back: the schedule returns to now.
    /// A store that kept 64 stretches dropped the rest, and the schedule stayed where the
    /// first one dropped began (the simulator's `recovers_after_quiet`: minutes of wait on a
    /// gate nobody used).
    pub(super) async fn a_long_queue_given_back_in_any_order_gives_the_gate_back(&mut self) {
        let store = self.instance().await;
        let gate = gate(&store, &self.name("queue"), 1);
        let mut queue = Vec::with_capacity(QUEUE);
        for _ in 0..QUEUE {
            queue.push(granted(
                "a place in the queue",
                reserve_in(&[(&gate, 1)], None).await,
            ));
        }
        for slot in queue.iter().skip(1).step_by(2) {
            store.refund(&gate, *slot);
        }
        for slot in queue.iter().step_by(2).rev() {
            store.refund(&gate, *slot);
        }
        eventually_granted("a queue given back in any order gives the gate back", &gate).await;
    }

    /// A reservation charged for calls made alone (`Ask::alone_used`, 30 min ahead) is given
    /// back: the store's schedule stays past those calls, which were made.
    pub(super) async fn a_slot_given_back_keeps_the_charge_of_calls_made_alone(&mut self) {
        let store = self.instance().await;
        let gate = gate(&store, &self.name("used"), 1);
        let half = u64::try_from((HOUR / 2).as_nanos()).unwrap_or(u64::MAX);
        let ask = GateAsk {
            gate: Arc::clone(&gate),
            cost: 1,
            interval: gate.interval * 1000,
            alone: Alone {
                held: half,
                used: half,
            },
        };
        let SharedSlots::Granted(granted) = reserve([Some(ask), None], None).await else {
            panic!("conformance: a reservation with no limit is granted");
        };
        let [Some(slot), _] = granted.slots else {
            panic!("conformance: a grant of one gate has its slot");
        };
        store.refund(&gate, slot);
        // A refund is sent in the background: what it must not do shows only later.
        sleep(Duration::from_millis(200)).await;
        refused(
            "the slot given back keeps the charge of calls made alone",
            reserve_in(&[(&gate, 1)], Some(Duration::ZERO)).await,
        );
    }
}
