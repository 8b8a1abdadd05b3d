//! How an attempt begins: the checks before the breaker (bulkhead, deadline, rate gates,
//! shared or local), the slot it then waits for, and its admission once the call may be made.

use super::super::learn::Ceiling;
#[cfg(feature = "shared")]
use super::super::slots::SharedStart;
use super::timer::set_timer;
use super::{AttemptProjection, Progress, Stage, Wait};
use crate::breaker::{Breaker, Ticket, Transition};
use crate::deadline::later;
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
    // The listeners hear how long the attempt took, and a slow-call breaker and an adaptive
    // bulkhead (which counts as listening) judge by it: the clock is read for them only (the attempt's time limit then counts from here, as it
    // would from its first poll).
    let timed = progress.report.listening || progress.breaker().is_some_and(Breaker::times_calls);
    if timed && this.limits.started.is_none() {
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
    /// First the end of a throttle's hold, then the checks again.
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
    #[cfg(feature = "shared")]
    if progress.settings.gated {
        match progress.shared_slots()? {
            SharedStart::Ask(wait) => return Ok(Begin::Wait(Wait::Shared(wait))),
            SharedStart::Held(until) => return Ok(Begin::Held(until)),
            SharedStart::Local => {}
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

/// How late a call may come to its slot and still take it: a timer's granularity and a busy
/// runtime's delay, which on a loaded machine is tens of milliseconds (the real-clock Redis
/// tests, beside two builds, lost their slots at 10 ms and were refused by their deadline).
/// Later (its future left unpolled, as a call shared by coalescing whose
/// first caller left), the slots after it were promised as if it had started: it takes a new
/// one, so that the gate's ceiling holds for the calls' starts, not only for its schedule.
const SLOT_MISSED: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether the slot due at `due` was missed (see [`SLOT_MISSED`]).
pub(super) fn missed(due: Option<Instant>) -> bool {
    due.is_some_and(|due| Instant::now().saturating_duration_since(due) > SLOT_MISSED)
}

/// When a caller waiting for a learning gate's slot due at `due` looks again: an answer may
/// place it sooner meanwhile.
fn looks_again(due: Instant) -> Instant {
    due.min(later(Instant::now(), crate::gate::SLOT_RECHECK))
}

/// A learning gate's slot came, as far as its caller knows: whether the attempt waits again,
/// for its slot placed sooner by an answer, for the declared ceiling over the starts, or
/// (granted by the store, and given back) to ask the store again; or the refusal of a wait
/// past the deadline.
pub(super) fn waits_again<F, E>(
    this: &mut AttemptProjection<'_, '_, '_, F, E>,
) -> Result<bool, Rejected> {
    let progress = &mut this.execution.progress;
    let due = match progress.slots_due() {
        Some(due) => Ceiling::At(looks_again(due)),
        None => progress.within_ceilings()?,
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
