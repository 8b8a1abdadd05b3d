//! An attempt of a policy with shared gates, once its store answered or it took its turn to
//! ask: on to the breaker, to its slot's wait, or to the local gate's waiting room.

use super::probe::through_breaker;
use super::timer::set_timer;
use super::{AttemptProjection, Stage, Wait};
use crate::deadline::later;
use crate::gate::AskTurn;
use crate::seams::SharedSlots;
use crate::Rejected;
use tokio::time::Instant;

/// The store answered (or did not, in time): the attempt goes on, or is refused.
pub(super) fn answered<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
    answer: SharedSlots,
) -> Result<(), Rejected> {
    this.timer.set(None);
    *this.cut = None;
    // A learning gate's slots start within its declared ceiling: checked where a slot's wait
    // ends.
    let learns = this.execution.progress.settings.learns;
    let alone = matches!(answer, SharedSlots::Unavailable);
    let wait = this.execution.progress.shared_answer(answer)?;
    if wait.is_zero() && !learns {
        return through_breaker(this);
    }
    // No answer: the local gate decides, and one that orders its waiters serves this attempt
    // in its room, not at the back of its schedule (what it books there, the store is
    // charged).
    if alone {
        if let Some(turn) = this.execution.progress.wait_in_turn()? {
            *this.wait = Some(Wait::Turn(turn));
            return Ok(());
        }
    }
    set_timer(this.timer.as_mut(), later(Instant::now(), wait));
    *this.stage = Stage::AwaitingSlot;
    Ok(())
}

/// The attempt took its instance's turn to ask the store: it asks when it starts again. Its
/// wait for the turn is told once the store grants its slot.
pub(super) fn took_turn<F, E>(this: &mut AttemptProjection<'_, '_, '_, F, E>, turn: AskTurn) {
    if let Some(admission) = &mut this.execution.progress.admission {
        admission.reserved.asking = Some(turn);
    }
    this.timer.set(None);
    *this.cut = None;
}
