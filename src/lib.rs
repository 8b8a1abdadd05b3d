//! Resilience as a declaration. One attribute on an `async fn` gives it a per-attempt
//! timeout, an operation deadline, retries for transient errors only (exponential backoff,
//! full jitter, `Retry-After` honoured), a circuit breaker (named, or one per argument
//! value), a bulkhead and a fallback. Its signature does not change.
//!
//! ```
//! use resil::{resilient, Rejected, Transient};
//! use std::time::Duration;
//!
//! #[derive(Debug, thiserror::Error, Transient)]
//! pub enum LlmError {
//!     #[error("provider busy")]
//!     #[transient]
//!     Busy,
//!     #[error("rate limited")]
//!     #[transient(retry_after = wait)]
//!     RateLimited { wait: Option<Duration> },
//!     #[error("bad request: {0}")]
//!     BadRequest(String), // permanent: never retried, never trips a breaker
//!     #[error(transparent)]
//!     #[transient(transparent)]
//!     Rejected(#[from] Rejected), // timeouts, open breaker, full bulkhead, ...
//! }
//!
//! pub struct ChatRequest { pub prompt: String }
//! pub struct ChatResponse { pub text: String }
//! pub struct Client;
//!
//! impl Client {
//!     #[resilient(timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8)]
//!     pub async fn complete(&self, model: &str, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
//!         self.http_call(model, req).await
//!     }
//!
//!     async fn http_call(&self, model: &str, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
//!         Ok(ChatResponse { text: format!("{model}: {}", req.prompt) })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let request = ChatRequest { prompt: "hello".into() };
//! let answer = Client.complete("gpt-4o", &request).await.unwrap();
//! assert_eq!(answer.text, "gpt-4o: hello");
//! # }
//! ```
//!
//! Errors say for themselves whether they are worth retrying, through [`Transient`]; the
//! runtime's own failures are [`Rejected`].
//!
//! # One operation, one budget
//!
//! Retries multiply across layers. A gateway calling a service calling a dependency, each
//! with `retry = 3`, would send 4 × 4 × 4 = 64 calls to a dependency that is already down;
//! an inner `timeout = "20s"` inside an outer `deadline = "1s"` would keep working long after
//! the caller left. So the outermost `#[resilient]` call opens an *operation* and every call
//! nested inside it respects it:
//!
//! - one **deadline**: a nested attempt gets the smaller of its own timeout and the time
//!   left; past the deadline, nested calls fail with [`Rejected::DeadlineExceeded`] without
//!   calling;
//! - one **retry owner**: a call draws its retries from the allowance of the nearest enclosing
//!   call that declares retries (a call with none above it owns its own): the dependency
//!   above sees 4 calls, not 64;
//! - an **id** per call, stable across its attempts: [`Operation::current()`]`.id()` is a
//!   ready-made `Idempotency-Key`. The n-th nested call started by an attempt of its parent is
//!   `{parent id}.{n}`, so two charges inside one checkout get two keys, and a retried
//!   checkout re-derives the same two, which the provider replays instead of billing twice;
//!   `operation_id()` is the outermost call's;
//! - **one verdict per breaker**: a nested call on a breaker that an enclosing call holds goes
//!   through as part of that call, and the breaker counts the operation once.
//!
//! `nested = "independent"` keeps a call's own retry count inside an operation: right for a
//! separate contract with its own budget (another team's service behind a queue), wrong for
//! plain layering, where it brings the multiplication back. `retry_budget = "20%"` caps
//! retries across operations, as a share of first attempts over a sliding 10 s window, which
//! holds even when failures are too scattered to open a breaker. The context lives in the
//! task: `tokio::spawn` does not inherit it; carry it with [`Operation::scope`].
//! `cargo run --example one_budget` prints a trace of all this. Everything the attribute does is also available
//! by hand through [`Policy`] (see the `resil_runtime` crate, re-exported here).
//!
//! # The guide
//!
//! [`guide`] answers one question per page, from [first steps](guide::first_steps) to
//! [many instances](guide::many_instances), and holds the [reference](mod@guide::reference)
//! of every key.
//!
//! # Stability
//!
//! resil is 0.x: a minor release (0.2, 0.3) may break what follows, and says how in
//! `CHANGELOG.md`; a patch release never does.
//!
//! - **Kept until 1.0 unless a defect forces it**: the attribute's keys and what they
//!   accept, the `Transient` derive, the variants of [`Rejected`] (new ones may come: it is
//!   `#[non_exhaustive]`), the metric names and labels ([`series`]), the span names, the
//!   configuration file's format.
//! - **May change before 1.0**: the builder's method signatures, the variants and fields of
//!   [`events::Event`] (`#[non_exhaustive]`: match with a wildcard), the by-hand
//!   [`execution`] API, defaults that experience shows to be wrong (each change is listed),
//!   the Redis key layout of `shared = true` (instances of two versions should not share a
//!   Redis), and the error messages of the macro.
//! - **Not public**: `resil::__private`, which expansions call; it changes with every release,
//!   which is why the facade pins the macro and runtime crates to its exact version.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod guide;

// Named, not globbed: the public API is exactly this list.
#[cfg(feature = "chaos")]
#[cfg_attr(docsrs, doc(cfg(feature = "chaos")))]
#[doc(inline)]
pub use resil_runtime::chaos;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
#[doc(inline)]
pub use resil_runtime::http;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
#[doc(inline)]
pub use resil_runtime::middleware;
#[cfg(feature = "shared")]
#[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
#[doc(inline)]
pub use resil_runtime::shared;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
#[doc(inline)]
pub use resil_runtime::tower;
#[doc(inline)]
pub use resil_runtime::{breaker, events, operation, profiles, series, stream};
pub use resil_runtime::{
    worst_case, Backoff, Bulkhead, BulkheadPermit, ByTransient, Classification, Classifier,
    ConfigError, Jitter, Judge, Key, KeyScope, KeyTuple, Keyed, Keys, Operation, OperationId,
    Order, Policy, PolicyBuilder, Priority, ProviderLimits, Quota, RateGate, Rejected, RetryBudget,
    Transient, Unkeyed,
};

// Circuit breakers, used by hand (the `breaker` module documents them), and every breaker
// in use, for a health endpoint and an operator's reset.
pub use resil_runtime::breaker::{breakers, BreakerStatus};
pub use resil_runtime::{
    Admission, Breaker, BreakerConfig, BreakerKind, BreakerState, KeyedBreaker, KeyedBreakers,
    Verdict, WindowSize,
};

/// One operation driven attempt by attempt, as `#[resilient]` expands to: the way to write
/// the retry loop by hand around a body that borrows `&mut self`.
pub mod execution {
    pub use resil_runtime::{Attempt, Execution, Next, Outcome, Race, Racers, Route};
}

/// Derives [`Transient`](trait@Transient): `#[transient]` marks what is worth retrying;
/// anything unmarked is permanent.
///
/// - `#[transient]` on a variant (or on a struct): transient.
/// - `#[transient(retry_after = field)]`: transient, and `field` (a `Duration` or an
///   `Option<Duration>`; a tuple field by index, `retry_after = 0`) holds how long the
///   provider asked us to wait. The backoff never waits less.
/// - `#[transient(transparent)]` on a variant or struct with one field: that field's own
///   `Transient` decides, as for a wrapped [`Rejected`].
/// - `#[transient(route)]`: permanent, but only for this target (a context too long for this
///   model, a content filter, a model not found): a route (`route = model in [...]`) moves on
///   from it at once and never sends the request to that target again.
///
/// ```
/// use resil::{Rejected, Transient};
/// use std::time::Duration;
///
/// #[derive(Debug, Transient)]
/// enum PaymentError {
///     #[transient]
///     GatewayTimeout,
///     #[transient(retry_after = 0)]
///     Throttled(Duration),
///     Declined { reason: String },
///     #[transient(transparent)]
///     Rejected(Rejected),
/// }
///
/// assert!(PaymentError::GatewayTimeout.is_transient());
/// assert_eq!(PaymentError::Throttled(Duration::from_secs(2)).retry_after(), Some(Duration::from_secs(2)));
/// assert!(!PaymentError::Declined { reason: "card expired".into() }.is_transient());
/// assert!(PaymentError::Rejected(Rejected::Timeout { after: Duration::from_secs(1) }).is_transient());
/// ```
///
/// A type that derives it and is an error (`std::error::Error`) is also found in the chain of
/// a `Box<dyn Error + Send + Sync>` or, with the `anyhow` feature, an `anyhow::Error`: the
/// chain says what its variant says, throttle, wait and move-on included. A generic type is
/// not (each of its instances is a type of its own): list the ones you use with
/// [`transient_in_chains!`].
pub use resil_macros::Transient;

/// Lists types that implement [`Transient`](trait@Transient) by hand, so that a
/// `Box<dyn Error + Send + Sync>` (or, with the `anyhow` feature, an `anyhow::Error`) whose
/// chain holds one of them says what it says. A type that derives `Transient` needs none of
/// this (unless it is generic: list each instance you use, `transient_in_chains!(Failed<Db>)`).
/// The list is made at link time: nothing runs, and only an error's classification reads it.
///
/// ```
/// use resil::Transient;
/// use std::error::Error;
/// use std::fmt;
///
/// #[derive(Debug)]
/// struct Overloaded;
///
/// impl fmt::Display for Overloaded {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("the gateway is overloaded")
///     }
/// }
///
/// impl Error for Overloaded {}
///
/// impl Transient for Overloaded {
///     fn is_transient(&self) -> bool {
///         true
///     }
/// }
///
/// resil::transient_in_chains!(Overloaded);
///
/// let error: Box<dyn Error + Send + Sync> = Box::new(Overloaded);
/// assert!(error.is_transient());
/// ```
#[macro_export]
macro_rules! transient_in_chains {
    ($($ty:ty),+ $(,)?) => {$(
        const _: () = {
            #[$crate::__private::linkme::distributed_slice($crate::__private::TRANSIENT_TYPES_0_1)]
            #[linkme(crate = $crate::__private::linkme)]
            static TYPE: $crate::__private::TransientType = $crate::__private::transient_type::<$ty>;
        };
    )+};
}

/// Makes an `async fn` resilient. Every key is optional; durations are strings with a unit
/// (`"300ms"`, `"20s"`, `"1m"`, `"1m30s"`, `"1h"`) checked at compile time.
///
/// | key | meaning | default |
/// |---|---|---|
/// | `timeout = "20s"` | limit for one attempt; past it the attempt fails with [`Rejected::Timeout`] (transient) | none |
/// | `deadline = "45s"` | limit for the whole operation, all attempts and waits; no wait starts that cannot finish before it | none |
/// | `retry = 2` | extra attempts after the first, only when the error `is_transient()` | 0 |
/// | `backoff = "300ms..8s"` | wait before retry n = random(0, min(cap, base·2ⁿ)); when the error has a `retry_after()`, that plus the draw, so clients told the same `Retry-After` do not return together (`jitter = "none"`: exactly the longer of the two) | `"300ms..8s"` |
/// | `jitter = "full"` | `"full"`, `"equal"`, `"decorrelated"` or `"none"` | `"full"` |
/// | `transient = classify` | a function `fn(&E) -> bool` or `fn(&E) -> `[`Classification`] that says which errors are worth retrying, instead of `E`'s [`Transient`] (for an error type of another crate) | `E`'s `Transient` |
/// | `rejected = to_status` | with `transient`: a function `fn(`[`Rejected`]`) -> E` that makes `E` from resil's own failures, instead of `E`'s `From<Rejected>` (which the orphan rule forbids for a type of another crate) | `E`'s `From<Rejected>` |
/// | `breaker = "openai"` | the process-wide circuit breaker of that name | none |
/// | `breaker = "per_model"` | one breaker per value of the argument `model` (`&str`, `String`, or any `Clone + Hash + Eq + Display` type) | none |
/// | `breaker_threshold = 5` | consecutive transient failures that open the breaker | 5 |
/// | `breaker_cooldown = "30s"` | time open before one probe is let through | `"30s"` |
/// | `bulkhead = 8` | at most 8 operations of this function in flight; the 9th fails at once with [`Rejected::BulkheadFull`] | none |
/// | `fallback = Self::cached` | an async fn taking the same arguments, called when the operation ends in a transient error or a rejection (never for a permanent error) | none |
/// | `retry_budget = "20%"` | across operations, retries may add at most 20 % to first attempts over a sliding 10 s window; `"20%, min 10/s"` adds a floor | none |
/// | `shared = true` | (feature `redis`) keep the breaker and rate gates in the store [`Redis::connect`](crate::shared::Redis::connect) installed, shared by every instance of the service; when Redis does not answer, the local state decides | `false` |
/// | `shared_timeout = "50ms"` | how long a call waits for Redis before deciding locally (at most 1 s) | `"50ms"` |
/// | `shared_fail = "closed"` | refuse calls ([`Rejected::SharedUnavailable`]) while Redis does not answer, for a limit that must never be exceeded | `"open"` |
/// | `nested = "independent"` | inside another operation, keep this call's own retry count instead of drawing from the operation's allowance (see the crate docs) | `"shared"` |
///
/// The function must return `Result<T, E>` with `E: Transient + From<Rejected>` (with
/// `transient = ...`, `E: From<Rejected>` only, or neither with `rejected = ...` too). Its
/// signature, visibility, attributes and docs stay as written; its docs gain a
/// "Resilience" section with the policy and its worst-case latency.
///
/// # What it expands to
///
/// The policy is built once per function (a `static`), so a generic function, or a default
/// method of a trait, has one policy for every type it is used with: one bulkhead, one set of
/// gates, one breaker per value of `per_<arg>`. For state of each type's own, key by it
/// (`key = (self.name(), model)` with `breaker = "per_key"`), or put the attribute on each
/// impl's method. Each attempt re-runs the body as a
/// fresh `async` block, so the body may borrow `&mut self` and `return` and `?` behave as
/// before. Arguments taken by value are cloned for each attempt when there can be more than
/// one, or a fallback (a by-value argument that is not `Clone` is a compile error then).
///
/// ```
/// # use resil::{resilient, Rejected, Transient};
/// # #[derive(Debug, Transient)] enum Error { #[transient(transparent)] Rejected(Rejected) }
/// # impl From<Rejected> for Error { fn from(r: Rejected) -> Self { Error::Rejected(r) } }
/// # struct Client;
/// impl Client {
///     #[resilient(timeout = "2s", retry = 1, breaker = "per_model")]
///     async fn complete(&self, model: &str, prompt: String) -> Result<String, Error> {
///         Ok(format!("{model}: {prompt}"))
///     }
/// }
/// ```
/// is, without the macro:
/// ```
/// # use resil::execution::Next;
/// # use resil::{Keyed, Policy, Rejected, Transient};
/// # use std::sync::LazyLock;
/// # use std::time::Duration;
/// # #[derive(Debug, Transient)] enum Error { #[transient(transparent)] Rejected(Rejected) }
/// # impl From<Rejected> for Error { fn from(r: Rejected) -> Self { Error::Rejected(r) } }
/// # struct Client;
/// impl Client {
///     async fn complete(&self, model: &str, prompt: String) -> Result<String, Error> {
///         static POLICY: LazyLock<Policy<Keyed>> = LazyLock::new(|| {
///             Policy::builder()
///                 .name(concat!(module_path!(), "::complete"))
///                 .timeout(Duration::from_secs(2))
///                 .retry(1)
///                 .breaker_per_key("model", 5, Duration::from_secs(30))
///                 .build()
///                 .unwrap()
///         });
///         let outcome = {
///             let mut execution = POLICY.execute_keyed(model);
///             loop {
///                 let prompt = prompt.clone();
///                 if let Next::Done(outcome) = execution.attempt(async { Ok(format!("{model}: {prompt}")) }).await {
///                     break outcome;
///                 }
///             }
///         }; // the execution gives back its permit here, before any fallback runs
///         outcome.into_result()
///     }
/// }
/// ```
///
/// # For an error type that is not `Transient`
///
/// An error type of another crate (a gRPC `Status`, a cloud SDK's error) can neither derive
/// nor implement [`Transient`]. `transient = classify` names a function that decides for
/// it: `fn(&E) -> bool` (`true`: worth retrying), or `fn(&E) -> `[`Classification`] to say
/// also a throttle, a wait (`Retry-After`) or move on (to a route's next target). The
/// runtime's own failures (a timeout, an open breaker) reach `E` through `From<Rejected>`
/// (or through the function named by `rejected = to_status`, `fn(Rejected) -> E`, when `E` is
/// of another crate and that impl is forbidden) and keep the runtime's classification,
/// whatever the function says of them: a timeout is retried even when the function calls
/// every `E` it made permanent.
///
/// ```
/// # use resil::{resilient, Classification};
/// # mod sdk {
/// #     #[derive(Debug)] pub struct Status { pub code: u16, pub retry_after: Option<std::time::Duration> }
/// #     impl From<resil::Rejected> for Status {
/// #         fn from(_: resil::Rejected) -> Self { Status { code: 599, retry_after: None } }
/// #     }
/// # }
/// fn classify(status: &sdk::Status) -> Classification {
///     match status.code {
///         429 => Classification::Throttle { wait: status.retry_after },
///         500..=599 => Classification::Transient,
///         _ => Classification::Permanent,
///     }
/// }
///
/// #[resilient(timeout = "2s", retry = 2, transient = classify)]
/// async fn fetch(id: u64) -> Result<String, sdk::Status> {
///     Ok(format!("record {id}"))
/// }
/// ```
///
/// # In an `#[async_trait]` impl or trait
///
/// Behind `Box<dyn Provider>` or `Arc<dyn Provider>`, trait methods are written with
/// `#[async_trait]`. Put `#[resilient]` on the method, in the impl or on a default method of
/// the trait, as on any `async fn`: `#[async_trait]` on the impl expands first, and the
/// attribute guards the body inside the boxed future it made, so the method keeps the
/// signature async-trait gave it and its future stays `Send`. `#[tracing::instrument]`
/// stacks on either side.
///
/// ```
/// # use resil::{resilient, Rejected, Transient};
/// # #[derive(Debug, Transient)] enum Error { #[transient(transparent)] Rejected(Rejected) }
/// # impl From<Rejected> for Error { fn from(r: Rejected) -> Self { Error::Rejected(r) } }
/// use async_trait::async_trait;
///
/// #[async_trait]
/// trait Provider: Send + Sync {
///     async fn complete(&self, model: &str, prompt: String) -> Result<String, Error>;
/// }
///
/// struct OpenAi;
///
/// #[async_trait]
/// impl Provider for OpenAi {
///     #[resilient(timeout = "20s", retry = 2, breaker = "per_model")]
///     async fn complete(&self, model: &str, prompt: String) -> Result<String, Error> {
///         Ok(format!("{model}: {prompt}"))
///     }
/// }
/// ```
///
/// # Mistakes it catches
///
/// Each is a compile error at the offending token that says what to do: not an `async fn`;
/// not returning `Result`; an error type that is not `Transient` or has no
/// `From<Rejected>`; a malformed or zero duration; an unknown key (with a suggestion); a
/// key given twice; `bulkhead = 0`; `per_<arg>` naming no argument; a by-value argument that
/// cannot be cloned for a retry; a `timeout` longer than the `deadline`; `breaker_threshold`
/// or `breaker_cooldown` without `breaker`; the attribute on a trait method without a body.
/// All the mistakes of one attribute are reported at once.
pub use resil_macros::resilient;

#[doc(hidden)]
pub mod __private;

/// Configuration at run time (feature `config`): overrides from a TOML file and from
/// `RESIL_<NAME>__<KEY>` environment variables, checked as a whole and applied to new
/// operations without a restart. See [`resil_runtime::config`] for the format and the rules;
/// here every `#[resilient]` function is known before its first call, so a misspelt name is
/// refused.
///
/// ```no_run
/// # async fn run() -> Result<(), resil::config::Refused> {
/// resil::config::load("resil.toml")?;
/// let _watching = resil::config::watch("resil.toml", std::time::Duration::from_secs(5));
/// # Ok(()) }
/// ```
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    pub use resil_runtime::config::{JoinHandle, Overrides, Problem, Refused};

    /// Builds every `#[resilient]` function's policy not built yet, so configuration knows it.
    fn build_every_site() {
        for site in crate::__private::SITES_0_1 {
            site();
        }
    }

    /// Checks `overrides` against every policy and applies them as a whole, or nothing (see
    /// [`resil_runtime::config::apply`]).
    pub fn apply(overrides: &Overrides) -> Result<usize, Refused> {
        build_every_site();
        resil_runtime::config::apply(overrides)
    }

    /// Reads `path` and the environment, and applies both (see
    /// [`resil_runtime::config::load`]).
    pub fn load(path: impl AsRef<Path>) -> Result<usize, Refused> {
        build_every_site();
        resil_runtime::config::load(path)
    }

    /// Loads `path` now and whenever it changes (see [`resil_runtime::config::watch`]).
    pub fn watch(path: impl Into<PathBuf>, every: Duration) -> JoinHandle<()> {
        build_every_site();
        resil_runtime::config::watch(path, every)
    }
}

/// Compiles the README's code blocks as written, so the quick start cannot rot (with feature
/// `reqwest`, which it uses); `tests/readme.rs` checks the rest of what the README promises.
#[cfg(all(doctest, feature = "reqwest"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
