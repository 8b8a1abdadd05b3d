//! The builder's classifier: a function that says which errors are worth retrying, for an
//! error type that does not implement `Transient`.

use super::PolicyBuilder;
use crate::policy::ByTransient;
use crate::{Classification, Classifier, Rejected};

impl<K> PolicyBuilder<K, ByTransient> {
    /// `classify` decides which errors are worth retrying, instead of the error type's
    /// [`Transient`](crate::Transient) impl: for an error type of another crate (a gRPC
    /// `Status`, a cloud SDK's error), which can neither derive nor implement it. What
    /// `transient = path` does on the attribute. `classify` returns `bool` (`true`: worth
    /// retrying) or a [`Classification`] (also throttle, wait and move on).
    ///
    /// The policy then runs operations whose error type is `E` ([`Policy::run`](crate::Policy::run),
    /// [`Policy::run_keyed`](crate::Policy::run_keyed),
    /// [`Policy::run_routed`](crate::Policy::run_routed)), which needs only
    /// `From<Rejected>`: resil's own failures (a timeout, an open breaker) reach the caller
    /// through it, and keep resil's classification (a timeout is retried whatever `classify`
    /// says of the `E` it became). Its type is `Policy<K, fn(&E) -> R>`, to name in a
    /// `static`. When `E` is of another crate, which can have no `From<Rejected>` either,
    /// give the conversion with [`rejected`](PolicyBuilder::rejected).
    ///
    /// ```
    /// use resil_runtime::{Policy, Rejected};
    /// use std::time::Duration;
    ///
    /// // An error of another crate: no `Transient`, and none can be added.
    /// #[derive(Debug, PartialEq)]
    /// enum Status { Unavailable, InvalidArgument, Internal(String) }
    /// impl From<Rejected> for Status {
    ///     fn from(rejected: Rejected) -> Self { Status::Internal(rejected.to_string()) }
    /// }
    ///
    /// fn is_retryable(status: &Status) -> bool {
    ///     *status == Status::Unavailable
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy: Policy<_, fn(&Status) -> bool> = Policy::builder()
    ///     .timeout(Duration::from_secs(2))
    ///     .retry(2)
    ///     .transient(is_retryable)
    ///     .build()
    ///     .unwrap();
    /// let mut calls = 0;
    /// let answer = policy
    ///     .run(|| {
    ///         calls += 1;
    ///         let unavailable = calls < 3;
    ///         async move { if unavailable { Err(Status::Unavailable) } else { Ok(calls) } }
    ///     })
    ///     .await;
    /// assert_eq!(answer, Ok(3));
    ///
    /// let refused = policy.run(|| async { Err::<u32, _>(Status::InvalidArgument) }).await;
    /// assert_eq!(refused, Err(Status::InvalidArgument)); // one call: not retried
    /// # }
    /// ```
    pub fn transient<E, R: Into<Classification>>(
        self,
        classify: fn(&E) -> R,
    ) -> PolicyBuilder<K, fn(&E) -> R> {
        self.retype(|ByTransient| classify)
    }
}

impl<K, E, R> PolicyBuilder<K, fn(&E) -> R> {
    /// How resil's own failures (a timeout, an open breaker, a full bulkhead) become an `E`,
    /// instead of `From<Rejected>`: for an error type of another crate, for which the orphan
    /// rule forbids that impl too. What `rejected = path` does on the attribute. They keep
    /// resil's classification whatever the classifier says of the `E` they became. The
    /// policy's type is `Policy<K, Classifier<E, R>>`.
    ///
    /// ```
    /// use resil_runtime::{Classifier, Policy, Rejected};
    /// use std::time::Duration;
    ///
    /// // As another crate defines it: no `Transient`, no `From<Rejected>`, and neither can
    /// // be implemented here.
    /// #[derive(Debug, PartialEq)]
    /// pub enum Status { Unavailable, DeadlineExceeded(String) }
    ///
    /// fn is_retryable(status: &Status) -> bool {
    ///     *status == Status::Unavailable
    /// }
    ///
    /// fn to_status(rejected: Rejected) -> Status {
    ///     Status::DeadlineExceeded(rejected.to_string())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy: Policy<_, Classifier<Status, bool>> = Policy::builder()
    ///     .timeout(Duration::from_secs(1))
    ///     .retry(1)
    ///     .transient(is_retryable)
    ///     .rejected(to_status)
    ///     .build()
    ///     .unwrap();
    /// let slow = policy
    ///     .run(|| async {
    ///         tokio::time::sleep(Duration::from_secs(5)).await;
    ///         Ok::<u32, Status>(1)
    ///     })
    ///     .await;
    /// // Two attempts timed out (a timeout is retried whatever `is_retryable` says).
    /// assert!(matches!(slow, Err(Status::DeadlineExceeded(message)) if message.contains("timed out")));
    /// # }
    /// ```
    pub fn rejected(self, rejected: fn(Rejected) -> E) -> PolicyBuilder<K, Classifier<E, R>> {
        self.retype(|classify| Classifier { classify, rejected })
    }
}
