//! What `#[resilient]` and `#[derive(Transient)]` expand to. Not a public API.

use std::future::Future;

pub use core::time::Duration;
pub use resil_runtime::stream::{Commit, Committed, OrFallback, ResilientStream, Stream};
pub use resil_runtime::{
    Attempt, BreakerKind, Classification, Execution, FromRejected, Jitter, KeyTuple, Keyed, Next,
    Outcome, Policy, PolicyBuilder, Race, Rejected, Route, Transient, WindowSize,
};
pub use std::sync::LazyLock;

pub use linkme;
pub use resil_runtime::{transient_type, TransientType, TRANSIENT_TYPES_0_1};

mod keys;
pub use keys::{keyed_execution, KeyByDeref, KeyByValue, KeyProbe};

/// What `#[derive(Transient)]` lists in `TRANSIENT_TYPES_0_1` for a type that may or may not be
/// an error (`std::error::Error`): autoref specialization, `(&&Probe::<T>::new()).in_chain(e)`
/// finds [`InChain`] when `T` is one (it is looked for in chains), else [`NotInChain`].
#[derive(Debug)]
pub struct Probe<T>(core::marker::PhantomData<fn() -> T>);

impl<T> Probe<T> {
    /// The probe of `T`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Probe(core::marker::PhantomData)
    }
}

/// An error type, found in chains by its type.
pub trait InChain {
    /// `error` as `Transient`, when it is of this type.
    fn __resil_in_chain<'a>(
        &self,
        error: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a dyn Transient>;
}

impl<T: std::error::Error + Transient + 'static> InChain for &Probe<T> {
    fn __resil_in_chain<'a>(
        &self,
        error: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a dyn Transient> {
        transient_type::<T>(error)
    }
}

/// Not an error type: never in a chain.
pub trait NotInChain {
    /// Nothing.
    fn __resil_in_chain<'a>(
        &self,
        error: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a dyn Transient>;
}

impl<T> NotInChain for Probe<T> {
    fn __resil_in_chain<'a>(
        &self,
        _: &'a (dyn std::error::Error + 'static),
    ) -> Option<&'a dyn Transient> {
        None
    }
}

/// Lists a type that derives `Transient` in `TRANSIENT_TYPES_0_1`, if it is an error (see
/// [`Probe`]). The derive writes it inside the body of the type's `is_transient`: written
/// beside the type (named, or in an anonymous `const _`), the element was lost by incremental
/// rebuilds of the crate (the list came out empty after an edit elsewhere in the file).
#[macro_export]
#[doc(hidden)]
macro_rules! __resil_in_chains {
    ($ty:ty, $static:ident) => {
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #[$crate::__private::linkme::distributed_slice($crate::__private::TRANSIENT_TYPES_0_1)]
        #[linkme(crate = $crate::__private::linkme)]
        static $static: $crate::__private::TransientType = |error| {
            #[allow(unused_imports)]
            use $crate::__private::{InChain as _, NotInChain as _};
            (&&$crate::__private::Probe::<$ty>::new()).__resil_in_chain(error)
        };
    };
}

/// Every `#[resilient]` function's policy, to build (and so register) before configuration
/// applies: filled at link time. Named for the release line, as `TRANSIENT_TYPES_0_1` is.
#[cfg(feature = "config")]
#[linkme::distributed_slice]
pub static SITES_0_1: [fn()];

/// Lists a `#[resilient]` function's policy in [`SITES_0_1`].
#[cfg(feature = "config")]
#[macro_export]
#[doc(hidden)]
macro_rules! __resil_site {
    ($policy:ident) => {
        #[$crate::__private::linkme::distributed_slice($crate::__private::SITES_0_1)]
        #[linkme(crate = $crate::__private::linkme)]
        static __RESIL_SITE: fn() = || {
            $crate::__private::LazyLock::force(&$policy);
        };
    };
}

/// Without configuration, policies are built at their first call and listed nowhere.
#[cfg(not(feature = "config"))]
#[macro_export]
#[doc(hidden)]
macro_rules! __resil_site {
    ($policy:ident) => {};
}

/// `shared = true` with the `redis` feature: nothing to check.
#[cfg(feature = "redis")]
#[macro_export]
#[doc(hidden)]
macro_rules! __resil_shared {
    () => {};
}

/// `shared = true` without the `redis` feature: say which feature to turn on.
#[cfg(not(feature = "redis"))]
#[macro_export]
#[doc(hidden)]
macro_rules! __resil_shared {
    () => {
        ::core::compile_error!(
            "`shared = true` keeps the breaker and rate gates in Redis, which needs resil's `redis` feature: resil = { version = \"0.1\", features = [\"redis\"] }"
        );
    };
}

/// Starts an operation of `policy` routed over `first`, a routed argument taken by reference,
/// then `others`, each converted to the argument's type.
#[inline]
pub fn route<'p, 'k, P, K, E, I>(
    policy: &'p Policy<P>,
    first: &'k K,
    others: I,
) -> Route<'p, &'k K, K, E>
where
    K: resil_runtime::Key + PartialEq + ?Sized,
    I: IntoIterator,
    I::Item: Into<&'k K>,
{
    policy.route(first, others.into_iter().map(Into::into))
}

/// [`route`] for a routed argument taken by value.
#[inline]
pub fn route_owned<'p, P, K, E, I>(policy: &'p Policy<P>, first: K, others: I) -> Route<'p, K, K, E>
where
    K: resil_runtime::Key + PartialEq,
    I: IntoIterator,
    I::Item: Into<K>,
{
    policy.route_owned(first, others.into_iter().map(Into::into))
}

/// `Result<T, E>` split into its parts, so the expansion can name them from the return type.
pub trait ResultType {
    /// `T`
    type Ok;
    /// `E`
    type Err;
}

impl<T, E> ResultType for Result<T, E> {
    type Ok = T;
    type Err = E;
}

/// One attempt, with the attempt's output type fixed to the function's return type so that
/// `?` in the body infers its conversion. The error type's bounds (`Transient`, `From<Rejected>`)
/// are those of the attempt's `Future`: checked once, where the expansion awaits it, so a
/// missing one is one error.
pub fn attempt<'a, 'p, R, F>(
    execution: &'a mut Execution<'p, R::Err>,
    attempt: F,
) -> Attempt<'a, 'p, F, R::Err>
where
    R: ResultType,
    F: Future<Output = Result<R::Ok, R::Err>>,
{
    execution.attempt(attempt)
}

/// [`attempt`] for a hedged function: `make` makes each racer's future.
// Inlined: the race is then built in place in the function's future, not copied into it.
#[inline(always)]
pub fn race<'a, 'p, R, F, M>(
    execution: &'a mut Execution<'p, R::Err>,
    make: M,
) -> Race<'a, 'p, resil_runtime::Plain<M>, R::Err>
where
    R: ResultType,
    M: FnMut() -> F,
    F: Future<Output = Result<R::Ok, R::Err>>,
{
    execution.race(make)
}

/// [`stream_attempt`] for a hedged function: `connect` makes each racer's connection.
pub fn stream_race<'a, 'p, T, E, S, F, M>(
    execution: &'a mut Execution<'p, E>,
    connect: M,
    commit: Commit<T>,
) -> impl Future<Output = Next<Committed<T, S>, E>> + use<'a, 'p, T, E, S, F, M>
where
    E: Transient + FromRejected,
    M: FnMut() -> F,
    F: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>>,
{
    execution.race_stream_until(connect, commit)
}

/// [`race`] on a route: each racer gets its target.
pub fn route_race<'a, 'p, R, Q, K, F, M>(
    route: &'a mut Route<'p, Q, K, R::Err>,
    make: M,
) -> impl Future<Output = Next<R::Ok, R::Err>> + use<'a, 'p, R, Q, K, F, M>
where
    R: ResultType,
    R::Err: Transient + FromRejected,
    Q: PartialEq,
    K: resil_runtime::Key + ?Sized,
    M: FnMut(&Q) -> F,
    F: Future<Output = Result<R::Ok, R::Err>>,
{
    route.race(make)
}

/// [`stream_race`] on a route: each racer connects to its target.
pub fn route_stream_race<'a, 'p, T, E, S, Q, K, F, M>(
    route: &'a mut Route<'p, Q, K, E>,
    connect: M,
    commit: Commit<T>,
) -> impl Future<Output = Next<Committed<T, S>, E>> + use<'a, 'p, T, E, S, Q, K, F, M>
where
    E: Transient + FromRejected,
    Q: PartialEq,
    K: resil_runtime::Key + ?Sized,
    M: FnMut(&Q) -> F,
    F: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>>,
{
    route.race_stream_until(connect, commit)
}

/// The policy of one `#[resilient]` site. The macro refused at compile time every setting
/// that [`PolicyBuilder::build`] would refuse, with the same `resil_spec::rules`; an error
/// here is a bug in resil, not in the user's code.
pub fn site_policy<K>(builder: PolicyBuilder<K>) -> Policy<K> {
    builder
        .build_reporting_conflicts()
        .unwrap_or_else(|error| panic!("resil bug: #[resilient] accepted a setting its runtime refuses ({error}); please report it"))
}

/// One attempt of a streaming function: the body connects, then the items are awaited up to
/// the one that `commit` accepts. `T` and `E` come from the declared
/// `Result<impl Stream<Item = Result<T, E>>, E>`, so `?` in the body infers its conversion.
/// `Transient` is checked once, where the expansion awaits the attempt (see [`attempt`]).
pub fn stream_attempt<'a, 'p, T, E, S, F>(
    execution: &'a mut Execution<'p, E>,
    connect: F,
    commit: Commit<T>,
) -> Attempt<'a, 'p, impl Future<Output = Result<Committed<T, S>, E>> + use<'p, T, E, S, F>, E>
where
    E: FromRejected,
    F: Future<Output = Result<S, E>>,
    S: Stream<Item = Result<T, E>>,
{
    execution.attempt_stream_until(connect, commit)
}

/// `commit_when = path`: a function recognising the item that commits a stream.
pub fn commit_when<T>(commits: fn(&T) -> bool) -> fn(&T) -> bool {
    commits
}

/// `complete_when = path`: a function recognising a stream's final item.
pub fn complete_when<T>(is_final: fn(&T) -> bool) -> fn(&T) -> bool {
    is_final
}

/// A whole number of tokens, for `rate_cost`.
#[diagnostic::on_unimplemented(
    message = "`rate_cost` must be a whole number of units (tokens), not `{Self}`",
    label = "this is not a count",
    note = "give an unsigned integer (u8, u16, u32, u64 or usize), such as `rate_cost = req.max_tokens`"
)]
pub trait Cost {
    /// The count, saturating at `u64::MAX`.
    fn units(self) -> u64;
}

macro_rules! cost {
    ($($ty:ty),*) => {$(
        impl Cost for $ty {
            fn units(self) -> u64 {
                u64::try_from(self).unwrap_or(u64::MAX)
            }
        }
    )*};
}
cost!(u8, u16, u32, u64, usize);

/// The class of a call, for `priority = ARG`.
#[diagnostic::on_unimplemented(
    message = "`priority` names an argument of type `resil::Priority`, not `{Self}`",
    label = "this is not a `Priority`",
    note = "declare the argument as `class: resil::Priority`, or give its type `Copy` and `impl From<{Self}> for resil::Priority`"
)]
pub trait AsPriority {
    /// The class.
    fn class(&self) -> resil_runtime::Priority;
}

#[diagnostic::do_not_recommend]
impl<T: Copy + Into<resil_runtime::Priority>> AsPriority for T {
    fn class(&self) -> resil_runtime::Priority {
        (*self).into()
    }
}

/// The class a call's argument says, for `priority = ARG`.
pub fn priority(class: &impl AsPriority) -> resil_runtime::Priority {
    class.class()
}

/// A value whose share a call waits in, for `fair = ARG`.
#[diagnostic::on_unimplemented(
    message = "`fair` names an argument whose values can be hashed, not `{Self}`",
    label = "this is not `Hash`",
    note = "name an argument that tells whose share the call is, such as `tenant: &str` or an id, or derive `Hash` on its type"
)]
pub trait FairKey {
    /// Gives the call the share of this value.
    fn fair_for<B>(&self, execution: &mut Execution<'_, B>);
}

#[diagnostic::do_not_recommend]
impl<T: std::hash::Hash + ?Sized> FairKey for T {
    fn fair_for<B>(&self, execution: &mut Execution<'_, B>) {
        execution.set_fair_key(self);
    }
}

/// What one attempt costs the token gate.
pub fn cost(cost: impl Cost) -> u64 {
    cost.units()
}

/// The fallback will serve this outcome if it failed.
pub fn mark_fallback<T, E>(execution: &mut Execution<'_, E>, outcome: &Outcome<T, E>) {
    if matches!(outcome, Outcome::Failed(_)) {
        execution.falls_back();
    }
}

/// The outcome of the only attempt of a policy without retries.
pub fn single<T, E>(next: Next<T, E>) -> Outcome<T, E> {
    match next {
        Next::Done(outcome) => outcome,
        Next::Retry => unreachable!("a policy with retry = 0 never retries"),
    }
}

/// `Clone`, with an error message written for a person.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is taken by value, but it cannot be cloned for another attempt",
    label = "each attempt needs its own `{Self}`",
    note = "take the argument by reference (`&{Self}`), or derive `Clone` for `{Self}`"
)]
pub trait CloneForRetry: Clone {}

#[diagnostic::do_not_recommend]
impl<T: Clone> CloneForRetry for T {}

/// A fresh copy of a by-value argument for one attempt.
pub fn clone_for_retry<T: CloneForRetry>(value: &T) -> T {
    value.clone()
}

/// [`clone_for_retry`] for an argument whose type is generic (it names a type parameter,
/// `impl Trait` or `Self`): bound by `Clone` itself, so that rustc's suggestion to restrict
/// the parameter names `Clone`, never a trait of this private module.
pub fn clone_generic_for_retry<T: Clone>(value: &T) -> T {
    value.clone()
}

/// A field named by `#[transient(retry_after = field)]`.
#[diagnostic::on_unimplemented(
    message = "`retry_after` must name a `Duration` or `Option<Duration>` field, not `{Self}`",
    label = "this field does not hold a wait"
)]
pub trait RetryAfterField {
    /// The wait it holds.
    fn retry_after_field(&self) -> Option<Duration>;
}

impl RetryAfterField for Duration {
    fn retry_after_field(&self) -> Option<Duration> {
        Some(*self)
    }
}

impl RetryAfterField for Option<Duration> {
    fn retry_after_field(&self) -> Option<Duration> {
        *self
    }
}

/// What a classifier (`transient = path`) returns.
#[diagnostic::on_unimplemented(
    message = "a `transient` classifier returns `bool` or `resil::Classification`, not `{Self}`",
    label = "this function returns `{Self}`",
    note = "write `fn classify(error: &E) -> bool` (true: worth retrying), or return `resil::Classification` to say throttle, wait or move on"
)]
pub trait IntoClassification {
    /// What it says.
    fn into_classification(self) -> Classification;
}

#[diagnostic::do_not_recommend]
impl IntoClassification for bool {
    fn into_classification(self) -> Classification {
        self.into()
    }
}

#[diagnostic::do_not_recommend]
impl IntoClassification for Classification {
    fn into_classification(self) -> Classification {
        self
    }
}

/// The error of a function with `transient = path`, as the runtime sees it.
pub use resil_runtime::Judged;

/// `Result<T, Judged<E>>` for `R = Result<T, E>`: what an attempt of a function with
/// `transient = path` returns to the runtime.
pub type JudgedResult<R> = Result<<R as ResultType>::Ok, Judged<<R as ResultType>::Err>>;

/// What a classifier said, as a [`Classification`].
pub fn classification(said: impl IntoClassification) -> Classification {
    said.into_classification()
}

/// `transient = classify`: the attempt's error, judged by `classify` (the expansion's
/// closure around the user's function, so that a path of the wrong kind is reported at the
/// path). `R` is the function's return type, so that `?` in the body infers its conversion.
pub async fn judge<R, F>(classify: fn(&R::Err) -> Classification, attempt: F) -> JudgedResult<R>
where
    R: ResultType,
    F: Future<Output = Result<R::Ok, R::Err>>,
{
    attempt.await.map_err(|error| Judged::body(error, classify))
}

/// `From<Rejected>` for a function with `transient = path`, with an error message that says
/// what is still needed and why.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot carry resil's own failures (timeouts, open breaker, full bulkhead): it does not implement `From<resil::Rejected>`",
    label = "this error type needs `From<resil::Rejected>`",
    note = "with `transient = ...` the error type need not implement `Transient`, but a timeout or an open breaker must still reach the caller as a `{Self}`: implement `From<resil::Rejected>` for it, or, for a type of another crate, name a function that makes one: `rejected = to_status` with `fn to_status(rejected: resil::Rejected) -> {Self}`; resil keeps its own classification of those failures"
)]
pub trait CarriesRejected: From<Rejected> {}

#[diagnostic::do_not_recommend]
impl<E: From<Rejected>> CarriesRejected for E {}

/// The outcome of a function with `transient = path`, in its own error type.
pub fn unjudged<T, E: CarriesRejected>(outcome: Outcome<T, Judged<E>>) -> Outcome<T, E> {
    unjudged_by(outcome, E::from)
}

/// The outcome of a function with `transient = path` and `rejected = carry`, in its own error
/// type: resil's failures made an `E` by `carry`.
pub fn unjudged_by<T, E>(
    outcome: Outcome<T, Judged<E>>,
    carry: impl Fn(Rejected) -> E,
) -> Outcome<T, E> {
    match outcome {
        Outcome::Completed(result) => Outcome::Completed(result.map_err(|e| e.into_error(&carry))),
        Outcome::Failed(judged) => Outcome::Failed(judged.into_error(carry)),
    }
}
