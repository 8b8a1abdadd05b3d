//! Waiters served in turn (`priority`, `fair`), from what the listeners heard of each wait
//! served (`Event::Served`): no waiter is served while a more urgent one waits in its room,
//! nor before an earlier one of its class (of its value, with `fair`), unless aging promoted
//! it; and aging promotes a class only once it was passed over as often as documented. A
//! shared gate's rooms are not checked here (each instance asks the store in turn, and what
//! it granted alone while the store was late is taken again from it).

use std::collections::{BTreeMap, BTreeSet};

use resil_runtime::Priority;
use tokio::time::Instant;

use super::{Checker, Inv};
use crate::ear::Who;
use crate::plan::Plan;

/// One wait served, as heard.
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) who: Who,
    pub(crate) id: Option<String>,
    /// `"rate"`, `"token_rate"` or `"bulkhead"`.
    pub(crate) wait: &'static str,
    pub(crate) class: Priority,
    pub(crate) joined: Instant,
    pub(crate) at: Instant,
    pub(crate) promoted: bool,
}

/// A waiting room: the instance, its policy, what it waits for, and the key of a room per key.
type Room = (usize, u8, &'static str, Option<usize>);

/// A wait served in a room, with its caller's `fair` value if it is held to its order (not a
/// shared call, which may be left unpolled and then passed over by design; not one whose
/// caller is unknown).
type Placed = (Served, Option<u8>);

impl Checker {
    /// At quiescence: each room's waits, held against each other.
    pub(crate) fn in_turn(&mut self, plan: &Plan) {
        let mut rooms: BTreeMap<Room, Vec<Placed>> = BTreeMap::new();
        // The policies and waits some of whose waits could not be placed in their key's room.
        let mut unplaced = BTreeSet::new();
        for served in std::mem::take(&mut self.ledger.served) {
            let (instance, which) = served.who;
            let spec = plan.spec_of(which);
            // A shared gate's order is each instance's, each asking the store in turn: what
            // a waiter sees of the others' bookings is not this room's. The rate gate's
            // turn, or the token gate's when it is alone.
            let shared = plan.shared.is_some() && served.wait != "bulkhead";
            if !(spec.turns.priority || spec.turns.fair) || shared {
                continue;
            }
            let per_key = match served.wait {
                "rate" => spec.rate.as_ref().is_some_and(|rate| rate.per_key),
                "token_rate" => spec.tokens.as_ref().is_some_and(|tokens| tokens.per_key),
                _ => spec.bulkhead.as_ref().is_some_and(|b| b.per_key),
            };
            let caller = (served.id.as_ref())
                .and_then(|id| self.owners.get(id))
                .and_then(|&(id, depth)| Some((plan.callers.iter().find(|c| c.id == id)?, depth)));
            // A routed call's room per key is its attempt's target, which the event does not say.
            let target = caller.and_then(|(caller, depth)| match depth {
                0 => (!caller.routed).then(|| caller.targets[0]),
                _ => caller.nested,
            });
            let key = match (per_key, target) {
                (false, _) => None,
                (true, Some(target)) => Some(target),
                (true, None) => {
                    unplaced.insert((instance, which, served.wait));
                    continue;
                }
            };
            // A stream is called with neither class nor value (`run_stream_until`).
            let tenant = (caller.filter(|(caller, _)| !caller.shares)).map(|(caller, depth)| {
                match depth == 0 && caller.stream.is_some() {
                    true => u8::MAX,
                    false => caller.tenant,
                }
            });
            let room = (instance, which, served.wait, key);
            rooms.entry(room).or_default().push((served, tenant));
        }
        for (room, mut waits) in rooms {
            let spec = if room.1 == 0 {
                &plan.outer
            } else {
                &plan.inner
            };
            waits.sort_by_key(|(served, _)| served.at);
            self.room_in_turn(room, &waits, spec.turns.fair);
            if room.3.is_none() || !unplaced.contains(&(room.0, room.1, room.2)) {
                self.aged_in_turn(room, &waits);
            }
        }
    }

    /// `waits`, in the order served: no waiter passed over.
    fn room_in_turn(&mut self, room: Room, waits: &[Placed], fair: bool) {
        for (waiter, tenant) in waits {
            let Some(tenant) = tenant else {
                continue;
            };
            // Those served while it waited, not at the instant it joined or was served.
            let from = waits.partition_point(|(served, _)| served.at <= waiter.joined);
            let to = waits.partition_point(|(served, _)| served.at < waiter.at);
            let passed: Vec<&Placed> = (waits[from..to.max(from)].iter())
                // Aging serves a class before a more urgent one, never out of its own order.
                .filter(|(other, other_tenant)| {
                    (other.class > waiter.class && !other.promoted)
                        || (other.class == waiter.class
                            && other.joined > waiter.joined
                            && (!fair || *other_tenant == Some(*tenant)))
                })
                .collect();
            self.check(Inv::InTurn, passed.is_empty(), None, || {
                let (first, first_tenant) = passed[0];
                format!(
                    "{}: a {:?} waiter of t{tenant} (joined {:?} before it was served) was passed over by {} later or less urgent, the first a {:?} of {first_tenant:?} that joined {:?} after it",
                    name(room),
                    waiter.class,
                    waiter.at - waiter.joined,
                    passed.len(),
                    first.class,
                    first.joined.saturating_duration_since(waiter.joined),
                )
            });
        }
    }

    /// A wait served before a more urgent one (`promoted`) only once its class was passed
    /// over `Priority::AGING_PASSES` times: that many more urgent served since its class last was.
    fn aged_in_turn(&mut self, room: Room, waits: &[Placed]) {
        for (at, (waiter, _)) in waits.iter().enumerate() {
            if !waiter.promoted {
                continue;
            }
            let passes = (waits[..at].iter().rev())
                .take_while(|(other, _)| other.class != waiter.class)
                .filter(|(other, _)| other.class < waiter.class)
                .count();
            self.check(Inv::InTurn, passes as u32 >= Priority::AGING_PASSES, None, || {
                format!(
                    "{}: a {:?} waiter served by aging before a more urgent one after its class was passed over {passes} times (aging after {})",
                    name(room),
                    waiter.class,
                    Priority::AGING_PASSES
                )
            });
        }
    }
}

fn name(room: Room) -> String {
    let key = room.3.map_or(String::new(), |key| format!(" of key {key}"));
    format!("i{} policy {} {} room{key}", room.0, room.1, room.2)
}
