//! The ways to run a [`Policy`]: whole operations ([`Policy::run`], streams, per key), or
//! one attempt at a time from an [`Execution`].

use std::future::Future;
use std::sync::Arc;

use futures_core::Stream;

use super::{Execution, Next};
use crate::key::Key;
use crate::policy::{BreakerRef, Keyed, Policy};
use crate::stream::{Commit, ResilientStream};
use crate::{Rejected, Transient};

impl Policy {
    /// Runs one operation: `make_attempt` is called once per attempt and returns that
    /// attempt's future. The result is the first success, the first permanent error, or the
    /// last transient error or rejection once no retry is allowed.
    ///
    /// The futures run inside the operation ([`crate::Operation::current()`] is `Some` in
    /// them); the factory itself runs just outside it.
    pub async fn run<T, E, F, Fut>(&self, make_attempt: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        drive(self.execute(), make_attempt).await
    }

    /// Runs a streaming call under the policy (see [`crate::stream`]): each attempt connects
    /// and waits for the first item; the stream is returned once that item is in hand.
    pub async fn run_stream<T, E, S, F, Fut>(
        &self,
        make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        self.run_stream_until(Commit::first_item(), make_attempt)
            .await
    }

    /// [`Policy::run_stream`], committing at the item that `commit` accepts (the items before
    /// it are held, then handed over): a stall before the content is retried. What
    /// `commit_when` and `complete_when` do on the attribute, with the same outcome for the
    /// same stream.
    ///
    /// ```
    /// use futures::StreamExt;
    /// use resil_runtime::stream::Commit;
    /// use resil_runtime::{Policy, Rejected};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder().retry(1).build().unwrap();
    /// let commit = Commit::when(|chunk: &&str| !chunk.is_empty());
    /// let stream = policy
    ///     .run_stream_until(commit, || async {
    ///         Ok::<_, Rejected>(futures::stream::iter(["", "Hello"].map(Ok)))
    ///     })
    ///     .await
    ///     .unwrap();
    /// let chunks: Vec<_> = stream.collect().await;
    /// assert_eq!(chunks, [Ok(""), Ok("Hello")]);
    ///
    /// // Complete without content: the final item commits too.
    /// let commit = commit.complete_when(|chunk| *chunk == "[DONE]");
    /// let stream = policy
    ///     .run_stream_until(commit, || async {
    ///         Ok::<_, Rejected>(futures::stream::iter(["", "[DONE]"].map(Ok)))
    ///     })
    ///     .await
    ///     .unwrap();
    /// let chunks: Vec<_> = stream.collect().await;
    /// assert_eq!(chunks, [Ok(""), Ok("[DONE]")]);
    /// # }
    /// ```
    pub async fn run_stream_until<T, E, S, F, Fut>(
        &self,
        commit: Commit<T>,
        make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        drive_stream(self.execute(), make_attempt, commit).await
    }

    /// Starts one operation by hand: takes the bulkhead permit and starts the deadline.
    /// Then hand it one attempt future at a time with [`Execution::attempt`].
    #[inline]
    pub fn execute<E>(&self) -> Execution<'_, E> {
        let breaker = self.settings.breaker.as_deref().map(BreakerRef::Shared);
        Execution::start(&self.settings, breaker, None)
    }
}

impl Policy<Keyed> {
    /// [`Policy::run`] through the breaker, bulkhead and gates of `key` (those per key; the
    /// others are shared).
    pub async fn run_keyed<Q, T, E, F, Fut>(&self, key: &Q, make_attempt: F) -> Result<T, E>
    where
        Q: Key + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        drive(self.execute_keyed(key), make_attempt).await
    }

    /// [`Policy::run_stream`] through the state of `key`.
    pub async fn run_stream_keyed<Q, T, E, S, F, Fut>(
        &self,
        key: &Q,
        make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        Q: Key + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        self.run_stream_keyed_until(key, Commit::first_item(), make_attempt)
            .await
    }

    /// [`Policy::run_stream_until`] through the state of `key`.
    pub async fn run_stream_keyed_until<Q, T, E, S, F, Fut>(
        &self,
        key: &Q,
        commit: Commit<T>,
        make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        Q: Key + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        drive_stream(self.execute_keyed(key), make_attempt, commit).await
    }

    /// [`Policy::execute`] through the state of `key`.
    #[inline]
    pub fn execute_keyed<Q: Key + ?Sized, E>(&self, key: &Q) -> Execution<'_, E> {
        let settings = &self.settings;
        let scope = settings.keys.as_ref().map(|keys| keys.held(key));
        let breaker = match scope.as_ref().and_then(|scope| scope.breaker.as_ref()) {
            Some(breaker) => Some(BreakerRef::Keyed(Arc::clone(breaker))),
            None => settings.breaker.as_deref().map(BreakerRef::Shared),
        };
        Execution::start(settings, breaker, scope)
    }
}

async fn drive<T, E, F, Fut>(mut execution: Execution<'_, E>, mut make_attempt: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        if let Next::Done(outcome) = execution.attempt(make_attempt()).await {
            return outcome.into_result();
        }
    }
}

async fn drive_stream<'p, T, E, S, F, Fut>(
    mut execution: Execution<'p, E>,
    mut make_attempt: F,
    commit: Commit<T>,
) -> Result<ResilientStream<'p, T, E, S>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        if let Next::Done(outcome) = execution.attempt_stream_until(make_attempt(), commit).await {
            return execution.commit(outcome).into_result();
        }
    }
}
