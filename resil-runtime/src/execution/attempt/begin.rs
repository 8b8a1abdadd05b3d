//! How an attempt begins: the checks before the breaker (bulkhead, deadline, rate gates,
//! shared or local), the slot it then waits for, and its admission once the call may be made.

use super::super::learn::Ceiling;
use super::super::slots::ShareWait;
#[cfg(feature = "shared")]
use super::super::slots::SharedStart;
use super::timer::set_timer;
use super::{AttemptProjection, Progress, Stage, Wait};
use crate::breaker::{Breaker, Ticket, Transition};
use crate::deadline::later;
use crate::gate::SLOT_MISSED;
use crate::Rejected;
use tokio::time::Instant;

/// The call may be made: store the admission, then tell the listeners. Inlined: every call
/// that runs passes here.
#[inline(always)]
pub(super) fn admit<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
    ticket: Option<Ticket>,
    transition: Option<Transition>,
) {
    *this.admitted = ticket;
    *this.stage = Stage::Call;
    // The call uses the slots reserved for it.
    this.execution.progress.slots_used();
    let progress = &this.execution.progress;
    if let (Some(breaker), Some(transition)) = (progress.breaker(), transition) {
        progress.transition(breaker, transition);
    }
    // The listeners hear how long the call took, and a slow-call breaker and an adaptive
    // bulkhead (which counts as listening) judge by it: the clock is read for them only (the
    // attempt's time limit then counts from here, as it would from its first poll).
    let timed = progress.report.listening || progress.breaker().is_some_and(Breaker::times_calls);
    // After a wait for another call's probe verdict, the provider's time starts now; the
    // wait still counts toward the attempt's time limit: the timer armed while it waited
    // keeps the limit's end.
    if timed {
        this.limits.started = Some(Instant::now());
    }
    this.execution.started();
}

/// Where the checks before the breaker lead, when they did not reject the attempt.
pub(super) enum Begin<'p> {
    /// Straight to the breaker.
    Breaker,
    /// The rate gates' slot comes at this instant.
    Slot(Instant),
    /// First a wait: for a place in the bulkhead's queue, or for the shared gates' answer.
    Wait(Wait<'p>),
    /// First a wait (a throttle's hold, a batch call's place in a shared gate's share), then
    /// the checks again.
    #[cfg(feature = "shared")]
    Held(Instant),
}

/// The checks before the breaker: bulkhead, deadline, rate gates.
#[inline]
pub(super) fn start<'p>(progress: &mut Progress<'p>) -> Result<Begin<'p>, Rejected> {
    progress.before_call()?;
    let settings = progress.settings;
    if let Some(wait) = progress.admission.as_mut().and_then(|a| a.queue(settings)) {
        return Ok(Begin::Wait(Wait::Permit(wait)));
    }
    if progress.settings.gated {
        if let Some(begin) = before_slots(progress)? {
            return Ok(begin);
        }
    }
    let wait = progress.reserve_slots()?;
    if wait.is_zero() {
        if progress.settings.learns {
            match progress.within_ceilings()? {
                Ceiling::Now => {}
                Ceiling::At(at) => return Ok(Begin::Slot(at)),
                #[cfg(feature = "shared")]
                Ceiling::Again(at) => return Ok(Begin::Held(at)),
            }
        }
        return Ok(Begin::Breaker);
    }
    if let Some(turn) = progress.wait_in_turn()? {
        return Ok(Begin::Wait(Wait::Turn(turn)));
    }
    let due = later(Instant::now(), wait);
    match progress.settings.learns {
        true => Ok(Begin::Slot(looks_again(due))),
        false => Ok(Begin::Slot(due)),
    }
}

/// For a gated call, what comes before its slots: a batch call held back by the gate's batch
/// share waits for its place there; a shared gate's slots are asked of the store.
#[inline]
fn before_slots<'p>(progress: &mut Progress<'p>) -> Result<Option<Begin<'p>>, Rejected> {
    match progress.batch_turn()? {
        None => {}
        #[cfg(feature = "shared")]
        Some(ShareWait::Until(at, _)) => return Ok(Some(Begin::Held(at))),
        Some(ShareWait::InTurn) => {
            if let Some(turn) = progress.wait_in_turn()? {
                return Ok(Some(Begin::Wait(Wait::Turn(turn))));
            }
        }
    }
    #[cfg(feature = "shared")]
    match progress.shared_slots()? {
        SharedStart::Ask(wait) => return Ok(Some(Begin::Wait(Wait::Shared(wait)))),
        SharedStart::Held(until) => return Ok(Some(Begin::Held(until))),
        SharedStart::Turn(wait) => return Ok(Some(Begin::Wait(Wait::Ask(wait)))),
        SharedStart::Local => {}
    }
    Ok(None)
}

/// Whether the slot due at `due` was missed (see [`SLOT_MISSED`]): the slots after it were
/// promised as if it had started, so it takes a new one.
pub(super) fn missed(due: Option<Instant>) -> bool {
    due.is_some_and(|due| Instant::now().saturating_duration_since(due) > SLOT_MISSED)
}

/// When a caller waiting for a learning gate's slot due at `due` looks again: an answer may
/// place it sooner meanwhile.
fn looks_again(due: Instant) -> Instant {
    due.min(later(Instant::now(), crate::gate::SLOT_RECHECK))
}

/// A slot came, as far as its caller knows: whether the attempt waits again, for the other
/// gate's slot, which went back while this one came (see `Progress::take_deferred`; a shared
/// gate's is asked of the store from the start, `Progress::asks_deferred`); for a
/// learning gate's, for its slot placed sooner by an answer, for the declared ceiling over
/// the starts, or (granted by the store, and given back) to ask the store again; or the
/// refusal of a wait past the deadline.
pub(super) fn waits_again<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
) -> Result<bool, Rejected> {
    let progress = &mut this.execution.progress;
    let learns = progress.settings.learns;
    let due = match learns.then(|| progress.slots_due()).flatten() {
        Some(due) => Ceiling::At(looks_again(due)),
        #[cfg(feature = "shared")]
        None if progress.asks_deferred() => {
            *this.stage = Stage::Start;
            return Ok(true);
        }
        None => match progress.take_deferred()? {
            Some(at) if learns => Ceiling::At(looks_again(at)),
            Some(at) => Ceiling::At(at),
            None if learns => progress.within_ceilings()?,
            None => Ceiling::Now,
        },
    };
    match due {
        Ceiling::Now => return Ok(false),
        Ceiling::At(due) => set_timer(this.timer.as_mut(), due),
        #[cfg(feature = "shared")]
        Ceiling::Again(at) => {
            set_timer(this.timer.as_mut(), at);
            *this.stage = Stage::Held;
        }
    }
    Ok(true)
}
