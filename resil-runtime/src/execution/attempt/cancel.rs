//! An attempt dropped before its end: what it held goes back, and if its call was under
//! way, the listener hears it ended `Cancelled`.

use tokio::time::Instant;

use crate::breaker::{Ticket, Verdict};
use crate::execution::{Execution, Progress};

/// An attempt dropped before its end: a cancelled probe frees the slot for the next caller, a
/// cancelled call counts for nothing, and a wait for a rate slot gives the slot back.
#[inline(always)]
pub(super) fn cancel(admitted: &mut Option<Ticket>, progress: &mut Progress<'_>) {
    if let Some(ticket) = admitted.take().filter(|ticket| ticket.probe) {
        if let Some(breaker) = progress.breaker() {
            breaker.record(ticket, Verdict::Neutral);
        }
    }
    progress.refund_slots();
}

impl<E> Execution<'_, E> {
    /// Attempt `attempt`, its call started at `started`, dropped while the call was under way
    /// (`polled`: by this operation's poll, which publishes its frame; else between polls,
    /// when the operation keeps it): the listener hears it ended, with the operation's id.
    /// Called once what the attempt held went back, so that a listener that panics leaves
    /// nothing held. Between polls with no frame kept, a panic unwound through the last poll
    /// and took the frame with it: nothing is told (another operation's frame may be
    /// published now).
    #[cold]
    #[inline(never)]
    pub(super) fn cancelled(&self, attempt: u32, started: Option<Instant>, polled: bool) {
        // Not while a panic unwinds (a body's or a listener's, perhaps at this attempt's
        // end): a second panic in a drop would abort the process.
        if !self.progress.report.listening || std::thread::panicking() {
            return;
        }
        let operation = match &self.progress.frame {
            Some(frame) => frame.id(),
            None if polled => match crate::operation::current_id() {
                Some(operation) => operation,
                None => return,
            },
            None => return,
        };
        self.progress.cancelled(operation, attempt, started);
    }
}
