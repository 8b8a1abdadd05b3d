//! `fallback = path` as `#[resilient]` expands it: the attempts run one by one, and a failure
//! (a transient error with no retry left, or a rejection) served by the fallback once the
//! execution gave back its permit. The fallback answers at once from a cache, so that the
//! call's end still falls within its worst case.

use std::future::Future;

use resil_runtime::{Execution, Next, Outcome};

use crate::provider::SimError;
use crate::world::World;

/// What the fallback answers.
pub(crate) const CACHED: u32 = u32::MAX;

/// Runs call `index`'s attempts through `execution`, then its fallback if it failed.
pub(crate) async fn run<F, Fut>(
    world: &World,
    index: usize,
    mut execution: Execution<'_, SimError>,
    mut make: F,
) -> Result<u32, SimError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u32, SimError>>,
{
    let outcome = loop {
        if let Next::Done(outcome) = execution.attempt(make()).await {
            break outcome;
        }
    };
    if matches!(outcome, Outcome::Failed(_)) {
        execution.falls_back();
    }
    drop(execution);
    world.checker.borrow_mut().served(index, &outcome);
    match outcome {
        Outcome::Failed(_) => Ok(CACHED),
        outcome => outcome.into_result(),
    }
}
