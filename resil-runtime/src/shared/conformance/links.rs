//! The links the checks make to a store (a gate, a breaker with none behind it), and what
//! they ask through them.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use super::{HOUR, PATIENCE, WITHIN};
use crate::seams::{
    reserve, BreakerLink, GateAsk, GateLink, Granted, SharedSlots, SharedStore, Sharing, Slot,
};
use crate::Rejected;

/// A gate of `store` named `resil:{gate:NAME}:rate`, an hour between slots, `burst` at once.
pub(super) fn gate(store: &Arc<dyn SharedStore>, name: &str, burst: u64) -> Arc<GateLink> {
    let hour = u64::try_from(HOUR.as_nanos()).unwrap_or(u64::MAX);
    GateLink::new(&sharing(store), "rate", name, hour, burst)
}

/// A breaker's link in `store`, named `id`, with no breaker behind it.
pub(super) fn link(store: &Arc<dyn SharedStore>, id: &str) -> BreakerLink {
    BreakerLink {
        sharing: sharing(store),
        id: Arc::from(id),
        pending: Arc::default(),
    }
}

pub(super) fn sharing(store: &Arc<dyn SharedStore>) -> Arc<Sharing> {
    Arc::new(Sharing {
        store: Arc::clone(store),
        timeout: PATIENCE,
        fail_closed: false,
        heard: |_, _| {},
    })
}

/// Reserves `cost` in each gate at its declared interval, at once.
pub(super) async fn reserve_in(
    gates: &[(&Arc<GateLink>, u64)],
    limit: Option<Duration>,
) -> SharedSlots {
    let ask = |at: usize| {
        gates.get(at).map(|(gate, cost)| GateAsk {
            gate: Arc::clone(gate),
            cost: *cost,
            interval: gate.interval * 1000,
            alone: crate::seams::Alone::default(),
        })
    };
    reserve([ask(0), ask(1)], limit).await
}

/// The first slot of a grant.
pub(super) fn granted(what: &str, answer: SharedSlots) -> Slot {
    match answer {
        SharedSlots::Granted(Granted {
            slots: [Some(slot), _],
            ..
        }) => slot,
        answer => panic!("conformance: {what}: granted, not {answer:?}"),
    }
}

pub(super) fn refused(what: &str, answer: SharedSlots) {
    assert!(
        matches!(answer, SharedSlots::Refused(Rejected::RateLimited { .. })),
        "conformance: {what}: refused, not {answer:?}"
    );
}

pub(super) async fn eventually_granted(what: &str, gate: &Arc<GateLink>) {
    let since = Instant::now();
    while !matches!(
        reserve_in(&[(gate, 1)], Some(Duration::ZERO)).await,
        SharedSlots::Granted(_)
    ) {
        assert!(
            since.elapsed() < WITHIN,
            "conformance: never within {WITHIN:?}: {what}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}
