//! A race's racers: the first held in place, each hedge boxed with what it keeps beside
//! its attempt's state.

use std::pin::Pin;

use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::breaker::Ticket;
use crate::deadline::{Cut, Limits};
use crate::execution::admission::Admission;
use crate::execution::attempt::{cancel, Stage, Wait};
use crate::execution::{Execution, Progress};

/// A racer of a race: its first, in place, or the hedge at this index.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which {
    First,
    Hedge(usize),
}

/// A hedge: its attempt's state, boxed to stay pinned while the hedges move in their `Vec`.
pub(super) struct Racer<'p, F> {
    pub(super) lane: Pin<Box<Lane<'p, F>>>,
    pub(super) seat: Seat<'p>,
}

/// What a racer keeps beside its attempt's state.
pub(super) struct Seat<'p> {
    /// A hedge's own admission, in the execution's place while the hedge is polled; `None`
    /// for the first racer, whose admission is the execution's.
    pub(super) admission: Option<Option<Admission<'p>>>,
    /// Nested calls this hedge started: each racer numbers its own, so that the racers derive
    /// the same ids for the same nested call. The first racer's count is the frame's own,
    /// which a hedge's is swapped with while the hedge is polled.
    pub(super) children: u32,
    /// Its attempt number, which its events carry.
    pub(super) attempt: u32,
    /// Its maker's name for it.
    pub(super) tag: usize,
    /// A hedge sent to another target: if it wins, its admission becomes the operation's.
    pub(super) moved: bool,
    /// Its `resil.attempt` span, made at its first poll under a traced operation.
    #[cfg(feature = "tracing")]
    pub(super) span: Option<tracing::Span>,
}

pin_project! {
    /// The fields an [`crate::Attempt`] holds beside its execution.
    pub(super) struct Lane<'p, F> {
        #[pin]
        pub(super) future: Option<F>,
        #[pin]
        pub(super) timer: Option<Sleep>,
        pub(super) stage: Stage,
        pub(super) wait: Option<Wait<'p>>,
        pub(super) limits: Limits,
        pub(super) cut: Option<Cut>,
        pub(super) admitted: Option<Ticket>,
    }
}

impl<F> Lane<'_, F> {
    /// Whether the racer's call is under way (its hedge's delay counts from there). Read
    /// through the pin's projection: a `&Lane` would also cover the pinned future, which may
    /// hold references into itself.
    pub(super) fn stage_is_call(self: Pin<&mut Self>) -> bool {
        matches!(self.project().stage, Stage::Call)
    }
}

impl<'p, F> Lane<'p, F> {
    pub(super) fn new(progress: &Progress<'p>, future: F) -> Self {
        Lane {
            future: Some(future),
            timer: None,
            stage: Stage::Start,
            wait: None,
            limits: progress.limits(),
            cut: None,
            admitted: None,
        }
    }
}

impl<'p> Seat<'p> {
    pub(super) fn new(
        progress: &Progress<'p>,
        admission: Option<Option<Admission<'p>>>,
        tag: usize,
        moved: bool,
    ) -> Self {
        Seat {
            admission,
            children: 0,
            attempt: progress.tries.attempt,
            tag,
            moved,
            #[cfg(feature = "tracing")]
            span: None,
        }
    }

    /// Swaps this racer's admission (a hedge's) with the execution's: before and after each
    /// of its steps, so that they see its own.
    pub(super) fn swap_admission(&mut self, progress: &mut Progress<'p>) {
        if let Some(own) = &mut self.admission {
            std::mem::swap(own, &mut progress.admission);
        }
    }
}

impl<'p, F> Racer<'p, F> {
    /// Dropped before its end (by the race's poll when `polled`): what it holds goes back, it
    /// counts for nothing, and it is told ended so if its call was under way.
    pub(super) fn cancel<E>(&mut self, execution: &mut Execution<'p, E>, polled: bool) {
        let lane = self.lane.as_mut().project();
        let progress = &mut execution.progress;
        self.seat.swap_admission(progress);
        cancel(lane.admitted, progress);
        self.seat.swap_admission(progress);
        if matches!(lane.stage, Stage::Call) {
            execution.cancelled(self.seat.attempt, lane.limits.started, polled);
        }
    }
}
