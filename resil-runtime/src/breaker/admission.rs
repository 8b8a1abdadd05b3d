//! What a caller holds between asking a breaker and telling it how the call ended.

use super::word::Word;
use super::{Breaker, Transition, Verdict};
use crate::Rejected;

/// The outcome of the synchronous admission check.
#[derive(Debug)]
pub(crate) enum Admit<'b> {
    Pass(Admission<'b>),
    Wait,
    Reject(Rejected),
}

/// What a caller holds between its admission and its verdict: whether it is the probe, and the
/// generation that admitted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(crate) probe: bool,
    pub(super) generation: u32,
}

impl Ticket {
    pub(super) fn new(probe: bool, word: Word) -> Self {
        Ticket {
            probe,
            generation: word.generation(),
        }
    }
}

/// Permission to make one call through a [`Breaker`]. Report how the call ended with
/// [`Admission::record`]; dropping it unrecorded (the call was cancelled) counts for nothing
/// and, for a probe, lets the next caller probe.
#[must_use = "record the call's verdict, or drop the admission if the call was cancelled"]
#[derive(Debug)]
pub struct Admission<'b> {
    breaker: &'b Breaker,
    ticket: Ticket,
    transition: Option<Transition>,
}

impl<'b> Admission<'b> {
    pub(super) fn new(breaker: &'b Breaker, ticket: Ticket) -> Self {
        Admission {
            breaker,
            ticket,
            transition: None,
        }
    }

    pub(super) fn with_transition(mut self, transition: Transition) -> Self {
        self.transition = Some(transition);
        self
    }

    /// The breaker that admitted the call.
    pub fn breaker(&self) -> &'b Breaker {
        self.breaker
    }

    /// Is this call the half-open probe?
    pub fn is_probe(&self) -> bool {
        self.ticket.probe
    }

    /// The transition that admitting this call caused (open → half-open), if any.
    pub fn transition(&self) -> Option<Transition> {
        self.transition
    }

    /// Reports how the call ended; returns the state change it caused, if any.
    pub fn record(self, verdict: Verdict) -> Option<Transition> {
        let this = std::mem::ManuallyDrop::new(self);
        this.breaker.record(this.ticket, verdict)
    }

    /// Hands the duty of recording (or, for a cancelled probe, of releasing the slot with
    /// `record(ticket, Verdict::Neutral)`) to the caller, with the transition admitting it
    /// caused.
    pub(crate) fn detach(self) -> (Ticket, Option<Transition>) {
        let this = std::mem::ManuallyDrop::new(self);
        (this.ticket, this.transition)
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.ticket.probe {
            self.breaker.record_probe(self.ticket, Verdict::Neutral);
        }
    }
}
