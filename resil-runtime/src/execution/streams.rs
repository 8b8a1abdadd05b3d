//! A streaming call's attempts: each connects and waits for the item that commits it, and
//! the committed stream takes over what the operation held.

use std::future::Future;

use futures_core::Stream;

use super::{Attempt, Execution, Next, Outcome};
use crate::stream::{committing_item, Commit, Committed, Holdings, ResilientStream};
use crate::{Rejected, Transient};

impl<'p, E> Execution<'p, E> {
    /// One attempt of a streaming call: `connect`, then the stream's first item, under the
    /// attempt's timeout (see [`crate::stream`]).
    pub fn attempt_stream<T, S, Fut>(
        &mut self,
        connect: Fut,
    ) -> Attempt<'_, 'p, impl Future<Output = Result<Committed<T, S>, E>> + use<'p, T, E, S, Fut>, E>
    where
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: From<Rejected>,
    {
        self.attempt_stream_until(connect, Commit::first_item())
    }

    /// [`Execution::attempt_stream`] whose commit point is the item that `commit` accepts:
    /// the items before it are held (at most the policy's
    /// [`commit_hold`](crate::PolicyBuilder::commit_hold)) and handed over at the commit (see
    /// [`crate::stream`]).
    pub fn attempt_stream_until<T, S, Fut>(
        &mut self,
        connect: Fut,
        commit: Commit<T>,
    ) -> Attempt<'_, 'p, impl Future<Output = Result<Committed<T, S>, E>> + use<'p, T, E, S, Fut>, E>
    where
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: From<Rejected>,
    {
        let hold = self.progress.settings.commit_hold;
        self.attempt(committing_item(connect, commit, hold))
    }

    /// [`Execution::race`] for a streaming call: each racer connects with what `connect`
    /// returns and holds its items up to the one `commit` accepts; the first to commit wins.
    pub fn race_stream_until<T, S, Fut, M>(
        &mut self,
        mut connect: M,
        commit: Commit<T>,
    ) -> impl Future<Output = Next<Committed<T, S>, E>> + use<'_, 'p, T, E, S, Fut, M>
    where
        M: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        let hold = self.progress.settings.commit_hold;
        self.race(move || committing_item(connect(), commit, hold))
    }

    /// Ends a streaming operation: a committed stream takes over the bulkhead permit, the
    /// breaker and the deadline; a failure gives them back here, before any fallback runs.
    pub fn commit<T, S>(
        self,
        outcome: Outcome<Committed<T, S>, E>,
    ) -> Outcome<ResilientStream<'p, T, E, S>, E> {
        match outcome {
            Outcome::Completed(Ok(committed)) => {
                #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
                let mut progress = self.progress;
                #[cfg(feature = "metrics")]
                progress.report.meter.committed();
                let listener = progress.listener();
                let (breaker, scope, permit) = match progress.admission {
                    Some(admission) => (admission.breaker, admission.scope, admission.permit),
                    None => (None, None, None),
                };
                let holdings = Holdings {
                    listener,
                    breaker,
                    scope,
                    permit,
                    deadline: progress.deadline,
                    idle: progress.tuning.idle,
                };
                Outcome::Completed(Ok(ResilientStream::new(committed, holdings)))
            }
            Outcome::Completed(Err(error)) => Outcome::Completed(Err(error)),
            Outcome::Failed(error) => Outcome::Failed(error),
        }
    }
}
