//! Shrinking a failing schedule: callers are dropped by bisection (chunks of half, then a
//! quarter, ... then one) while the same invariant still breaks, then the store's faults if
//! it breaks without them.
//!
//! Written here rather than with proptest's shrinking: proptest shrinks the value tree it
//! generated, so the plan would have to be a proptest strategy, and its shrinks of latencies
//! and probabilities move every later event of the run and mostly lose the interleaving that
//! failed. Here the plan stays the seed's and only whole callers leave, each keeping its own
//! draws (every caller has its own generator), and the shrunk schedule replays from the
//! command line with `--seed S --only <callers>`.

use crate::check::Inv;
use crate::plan::Plan;
use crate::world;

/// At most this many runs spent shrinking one failure.
const RUNS: usize = 120;

fn fails(plan: &Plan, inv: Inv) -> bool {
    world::run(plan)
        .failures
        .iter()
        .any(|failure| failure.inv == inv)
}

pub(crate) fn shrink(plan: &Plan, inv: Inv) -> Plan {
    let mut plan = plan.clone();
    let mut runs = 0;
    let mut chunk = plan.callers.len().div_ceil(2);
    while chunk >= 1 && runs < RUNS {
        let mut start = 0;
        let mut dropped = false;
        while start < plan.callers.len() && runs < RUNS {
            let mut candidate = plan.clone();
            let end = (start + chunk).min(candidate.callers.len());
            candidate.callers.drain(start..end);
            runs += 1;
            if !candidate.callers.is_empty() && fails(&candidate, inv) {
                plan = candidate;
                dropped = true;
            } else {
                start += chunk;
            }
        }
        if !dropped {
            chunk /= 2;
        }
    }
    if !plan.store.is_empty() {
        let mut calm = plan.clone();
        calm.store.clear();
        if fails(&calm, inv) {
            plan = calm;
        }
    }
    plan
}
