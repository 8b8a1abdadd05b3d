//! The ways to run a [`Policy`]: whole operations ([`Policy::run`], streams, per key), or
//! one attempt at a time from an [`Execution`].

use futures_core::Stream;
use std::future::Future;

use super::route::breaker_of;
use super::{Execution, Next, Route};
use crate::key::Key;
use crate::policy::{BreakerRef, Keyed, Policy, Unkeyed};
use crate::stream::{Commit, ResilientStream};
use crate::{Judge, Judged, Rejected, Transient};

impl Policy {
    /// Runs one operation: `make_attempt` is called once per attempt and returns that
    /// attempt's future. The result is the first success, the first permanent error, or the
    /// last transient error or rejection once no retry is allowed.
    ///
    /// The futures run inside the operation ([`crate::Operation::current()`] is `Some` in
    /// them); the factory itself runs just outside it. To give the call a
    /// [`Priority`](crate::Priority) or a `fair` value, start it by hand:
    /// [`Policy::execute`], [`Execution::set_priority`], then [`Execution::run`].
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
        let breaker = breaker_of(settings, scope.as_ref());
        Execution::start(settings, breaker, scope)
    }
}

/// Routes: over the values of the key of a keyed policy, each with its own state; over any
/// values for a policy without keys, which then moves on after failures and judges every
/// target alike by its own breaker and gates.
impl<P> Policy<P> {
    /// Runs one operation over several targets, values of the policy's key: `first`, then
    /// `others` in order. Each attempt goes to a target whose breaker, bulkhead and gates
    /// would call now (one that would not is skipped, which costs no retry); a transient
    /// failure moves to the next target at once, and coming back to one that failed waits
    /// the backoff. `make_attempt` gets the attempt's target. See [`Route`].
    ///
    /// ```
    /// use resil_runtime::{Policy, Rejected};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder()
    ///     .retry(2)
    ///     .breaker_per_key("model", 1, Duration::from_secs(30))
    ///     .build()
    ///     .unwrap();
    /// let answer = |model: &'static str| async move {
    ///     if model == "gpt-4o" { Err(Rejected::Incomplete) } else { Ok(model) }
    /// };
    /// let first = policy.run_routed("gpt-4o", ["claude-sonnet"], answer).await;
    /// assert_eq!(first, Ok("claude-sonnet"));
    /// // gpt-4o's breaker is open now: the next call skips it without calling it.
    /// let second = policy.run_routed("gpt-4o", ["claude-sonnet"], answer).await;
    /// assert_eq!(second, Ok("claude-sonnet"));
    /// # }
    /// ```
    pub async fn run_routed<'k, K, T, E, F, Fut>(
        &self,
        first: &'k K,
        others: impl IntoIterator<Item = &'k K>,
        make_attempt: F,
    ) -> Result<T, E>
    where
        K: Key + PartialEq + ?Sized,
        F: FnMut(&'k K) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        drive_routed(self.route(first, others), make_attempt).await
    }

    /// [`Policy::run_routed`] for a streaming call: a target whose stream fails or stalls
    /// before its first item hands the operation to the next; after it nothing moves.
    pub async fn run_stream_routed<'k, K, T, E, S, F, Fut>(
        &self,
        first: &'k K,
        others: impl IntoIterator<Item = &'k K>,
        make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        K: Key + PartialEq + ?Sized,
        F: FnMut(&'k K) -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        self.run_stream_routed_until(first, others, Commit::first_item(), make_attempt)
            .await
    }

    /// [`Policy::run_stream_routed`] committing at the item `commit` accepts.
    pub async fn run_stream_routed_until<'k, K, T, E, S, F, Fut>(
        &self,
        first: &'k K,
        others: impl IntoIterator<Item = &'k K>,
        commit: Commit<T>,
        mut make_attempt: F,
    ) -> Result<ResilientStream<'_, T, E, S>, E>
    where
        K: Key + PartialEq + ?Sized,
        F: FnMut(&'k K) -> Fut,
        Fut: Future<Output = Result<S, E>>,
        S: Stream<Item = Result<T, E>>,
        E: Transient + From<Rejected>,
    {
        let mut route = self.route(first, others);
        let outcome = loop {
            let target = match route.target().await {
                Ok(target) => *target,
                Err(outcome) => break outcome,
            };
            let next = if route.execution().hedges() {
                let connect = |target: &&'k K| make_attempt(target);
                route.race_stream_until(connect, commit).await
            } else {
                let attempt = route
                    .execution()
                    .attempt_stream_until(make_attempt(target), commit);
                attempt.await
            };
            if let Next::Done(outcome) = next {
                break outcome;
            }
        };
        route.into_execution().commit(outcome).into_result()
    }

    /// Starts a routed operation by hand, over targets borrowed for it: see [`Route`].
    pub fn route<'k, K, E>(
        &self,
        first: &'k K,
        others: impl IntoIterator<Item = &'k K>,
    ) -> Route<'_, &'k K, K, E>
    where
        K: Key + PartialEq + ?Sized,
    {
        Route::new(&self.settings, |target| *target, first, others)
    }

    /// [`Policy::route`] over targets the route owns (the values of an argument taken by
    /// value).
    pub fn route_owned<K, E>(
        &self,
        first: K,
        others: impl IntoIterator<Item = K>,
    ) -> Route<'_, K, K, E>
    where
        K: Key + PartialEq,
    {
        Route::new(&self.settings, |target| target, first, others)
    }
}

impl<E: Transient + From<Rejected>> Execution<'_, E> {
    /// Runs the operation to its end, as [`Policy::run`] does: for an operation set up by
    /// hand first, such as one given its [`Priority`](crate::Priority) and `fair` value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resil_runtime::{Policy, Priority, Rejected};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder()
    ///     .rate(10, Duration::from_secs(1), 1)
    ///     .fair()
    ///     .build()
    ///     .unwrap();
    /// let mut execution = policy.execute::<Rejected>();
    /// execution.set_priority(Priority::Batch);
    /// execution.set_fair_key("tenant-42");
    /// assert_eq!(execution.run(|| async { Ok(5) }).await, Ok(5));
    /// # }
    /// ```
    pub async fn run<T, F, Fut>(self, make_attempt: F) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        drive(self, make_attempt).await
    }
}

impl<'k, K, E> Route<'_, &'k K, K, E>
where
    K: Key + PartialEq + ?Sized,
    E: Transient + From<Rejected>,
{
    /// Runs the routed operation to its end, as [`Policy::run_routed`] does: for one set up by
    /// hand first (its [`Route::execution`] given a priority, for instance).
    pub async fn run<T, F, Fut>(self, make_attempt: F) -> Result<T, E>
    where
        F: FnMut(&'k K) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        drive_routed(self, make_attempt).await
    }
}

/// A policy given a classifier ([`PolicyBuilder::transient`](crate::PolicyBuilder::transient)):
/// its operations fail with the classifier's error type, which needs no `Transient`. Each
/// attempt's error is judged once, as it comes; resil's own failures keep resil's
/// classification, and become an error of that type when the operation ends ([`Judge::carry`]).
impl<J: Judge> Policy<Unkeyed, J> {
    /// [`Policy::run`], each error judged by the classifier.
    pub async fn run<T, F, Fut>(&self, mut make_attempt: F) -> Result<T, J::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, J::Error>>,
    {
        let breaker = self.settings.breaker.as_deref().map(BreakerRef::Shared);
        let execution = Execution::start(&self.settings, breaker, None);
        let judge = self.classify;
        let judged = || judged(judge, make_attempt());
        let outcome = drive(execution, judged).await;
        outcome.map_err(|error| error.into_error(|rejected| judge.carry(rejected)))
    }
}

impl<J: Judge> Policy<Keyed, J> {
    /// [`Policy::run_keyed`], each error judged by the classifier.
    pub async fn run_keyed<Q, T, F, Fut>(&self, key: &Q, mut make_attempt: F) -> Result<T, J::Error>
    where
        Q: Key + ?Sized,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, J::Error>>,
    {
        let settings = &self.settings;
        let scope = settings.keys.as_ref().map(|keys| keys.held(key));
        let breaker = breaker_of(settings, scope.as_ref());
        let execution = Execution::start(settings, breaker, scope);
        let judge = self.classify;
        let judged = || judged(judge, make_attempt());
        let outcome = drive(execution, judged).await;
        outcome.map_err(|error| error.into_error(|rejected| judge.carry(rejected)))
    }
}

impl<P, J: Judge> Policy<P, J> {
    /// [`Policy::run_routed`], each error judged by the classifier (a
    /// [`Classification::MoveOn`](crate::Classification::MoveOn) moves the route on at once).
    pub async fn run_routed<'k, K, T, F, Fut>(
        &self,
        first: &'k K,
        others: impl IntoIterator<Item = &'k K>,
        mut make_attempt: F,
    ) -> Result<T, J::Error>
    where
        K: Key + PartialEq + ?Sized,
        F: FnMut(&'k K) -> Fut,
        Fut: Future<Output = Result<T, J::Error>>,
    {
        let route = Route::new(&self.settings, |target| *target, first, others);
        let judge = self.classify;
        let judged = |target| judged(judge, make_attempt(target));
        let outcome = drive_routed(route, judged).await;
        outcome.map_err(|error| error.into_error(|rejected| judge.carry(rejected)))
    }
}

/// An attempt whose error is judged as it comes.
async fn judged<T, J: Judge>(
    judge: J,
    attempt: impl Future<Output = Result<T, J::Error>>,
) -> Result<T, Judged<J::Error>> {
    attempt.await.map_err(|error| {
        let class = judge.judge(&error);
        Judged::Body(error, class)
    })
}

async fn drive_routed<'k, K, T, E, F, Fut>(
    mut route: Route<'_, &'k K, K, E>,
    mut make_attempt: F,
) -> Result<T, E>
where
    K: Key + PartialEq + ?Sized,
    F: FnMut(&'k K) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    loop {
        let target = match route.target().await {
            Ok(target) => *target,
            Err(outcome) => return outcome.into_result(),
        };
        let next = if route.execution().hedges() {
            route.race(|target| make_attempt(target)).await
        } else {
            route.execution().attempt(make_attempt(target)).await
        };
        if let Next::Done(outcome) = next {
            return outcome.into_result();
        }
    }
}

async fn drive<T, E, F, Fut>(mut execution: Execution<'_, E>, mut make_attempt: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Transient + From<Rejected>,
{
    if execution.hedges() {
        loop {
            if let Next::Done(outcome) = execution.race(&mut make_attempt).await {
                return outcome.into_result();
            }
        }
    }
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
    if execution.hedges() {
        loop {
            if let Next::Done(outcome) =
                execution.race_stream_until(&mut make_attempt, commit).await
            {
                return execution.commit(outcome).into_result();
            }
        }
    }
    loop {
        if let Next::Done(outcome) = execution.attempt_stream_until(make_attempt(), commit).await {
            return execution.commit(outcome).into_result();
        }
    }
}
