//! The policies behind [resil](https://docs.rs/resil): a circuit breaker, a bulkhead,
//! exponential backoff with jitter, per-attempt timeouts and an operation deadline, put
//! together by [`Policy`] in the order that makes them work. No macro magic: everything the
//! `#[resilient]` attribute does, you can do by hand.
//!
//! ```
//! use resil_runtime::{Policy, Rejected, Transient};
//! use std::time::Duration;
//!
//! /// What the provider can fail with, and what is worth retrying.
//! #[derive(Debug)]
//! enum LlmError {
//!     Overloaded,
//!     BadRequest,
//!     Rejected(Rejected),
//! }
//!
//! impl Transient for LlmError {
//!     fn is_transient(&self) -> bool {
//!         match self {
//!             LlmError::Overloaded => true,
//!             LlmError::BadRequest => false,
//!             LlmError::Rejected(rejected) => rejected.is_transient(),
//!         }
//!     }
//! }
//!
//! impl From<Rejected> for LlmError {
//!     fn from(rejected: Rejected) -> Self {
//!         LlmError::Rejected(rejected)
//!     }
//! }
//!
//! async fn complete(prompt: &str, attempt: u32) -> Result<String, LlmError> {
//!     if attempt == 0 { Err(LlmError::Overloaded) } else { Ok(format!("echo: {prompt}")) }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::builder()
//!     .name("llm::complete")
//!     .timeout(Duration::from_secs(20))
//!     .deadline(Duration::from_secs(45))
//!     .retry(2)
//!     .backoff(Duration::from_millis(300), Duration::from_secs(8))
//!     .breaker_per_key("model", 5, Duration::from_secs(30))
//!     .bulkhead(8)
//!     .build()?;
//!
//! let model = "gpt-4o";
//! let mut attempt = 0;
//! let answer = policy
//!     .run_keyed(model, || {
//!         let this_attempt = attempt;
//!         attempt += 1;
//!         complete("hello", this_attempt)
//!     })
//!     .await;
//! assert_eq!(answer.unwrap(), "echo: hello");
//! # Ok(()) }
//! ```
//!
//! The order, per operation: the [`Bulkhead`] permit is taken once (waiting in its queue, if
//! it has one) and held across retries; each attempt takes its slot in the [`RateGate`]s,
//! asks the [`Breaker`], then runs under the attempt's timeout and what is left of the
//! deadline; a transient error is retried after a [`Backoff`] wait (never shorter than the
//! error's `retry_after()`, never past the deadline, never into an open breaker). Errors say
//! whether they are worth retrying through [`Transient`]; the runtime's own failures are
//! [`Rejected`]. A streaming call ([`stream`]) is retried up to its first item, then hands
//! its permit and breaker to the stream it returns.
//!
//! # Layers
//!
//! Each module belongs to one layer and imports only from the layers its row allows; the
//! architecture test (`tests/architecture.rs`) reads this table and fails, naming the file
//! and the import, when one does not.
//!
//! | layer | modules | may import | what it holds |
//! |---|---|---|---|
//! | foundation | `sync`, `transient`, `classification`, `rejected`, `key`, `config_error`, `operation_id`, `breaker_state`, `heard`, `priority` | — | the words every layer speaks: errors, keys, operation ids, breaker states, priorities, the atomics (std or loom) |
//! | primitives | `backoff`, `budget`, `bulkhead`, `deadline`, `gate`, `breaker`, `registry`, `latency`, `seams` | foundation | state machines that return what happened (a transition, an admission, a wait), and the public trait they hold of a store shared by many instances (`SharedStore`) |
//! | observers | `events`, `meter`, `series` | foundation | what listeners, tracing and metrics hear: plain data |
//! | policy | `policy`, `operator` | foundation, primitives, observers | a policy's settings, builder, keys and tunings; an operator's handles on breakers |
//! | execution | `operation`, `execution`, `stream` | foundation, primitives, observers, policy | one operation run through a policy's stages; streams and nested calls |
//! | integrations | `config`, `shared`, `tower`, `middleware`, `chaos`, `http`, `chain` | every layer | run-time configuration, the shared stores (Redis, in memory) and their conformance checks, tower, reqwest, chaos, errors classified by their chain (boxed, anyhow) |
//! | checks | `loom` | every layer | model checks, under `--cfg resil_loom` |
//!
//! The hot path (breaker closed, bulkhead free, answer ready on the first poll) allocates
//! nothing, takes no lock and creates no timer.
// `deny`, not `forbid`: the one exception, following the chain of published frames, is
// allowed where it stands and argued there (operation/frame.rs).
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod backoff;
pub mod breaker;
mod breaker_state;
mod budget;
mod bulkhead;
mod chain;
#[cfg(feature = "chaos")]
#[cfg_attr(docsrs, doc(cfg(feature = "chaos")))]
pub mod chaos;
mod classification;
pub mod config;
mod config_error;
mod deadline;
pub mod events;
mod execution;
mod gate;
mod heard;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
mod key;
mod latency;
#[cfg(all(test, resil_loom))]
mod loom;
#[cfg(feature = "metrics")]
mod meter;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
pub mod middleware;
pub mod operation;
mod operation_id;
mod operator;
mod policy;
mod priority;
mod registry;
mod rejected;
#[cfg(feature = "shared")]
mod seams;
pub mod series;
#[cfg(feature = "shared")]
#[cfg_attr(docsrs, doc(cfg(feature = "shared")))]
pub mod shared;
pub mod stream;
mod sync;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
mod transient;

pub use backoff::{Backoff, Jitter};
pub use breaker::{
    Admission, Breaker, BreakerConfig, BreakerKind, BreakerState, KeyedBreaker, KeyedBreakers,
    Verdict, WindowSize,
};
pub use budget::RetryBudget;
pub use bulkhead::{Bulkhead, BulkheadPermit};
#[doc(hidden)]
pub use chain::{transient_type, TransientType, TRANSIENT_TYPES_0_1};
#[doc(hidden)]
pub use classification::Judged;
pub use classification::{Classification, Classifier, Judge};
pub use config_error::ConfigError;
pub use execution::{Attempt, Execution, Next, Outcome, Race, Racers, Route};
#[doc(hidden)]
pub use execution::{Hedging, Lost, Plain};
pub use gate::RateGate;
pub use heard::{ProviderLimits, Quota};
pub use key::{Key, KeyTuple, MAX_KEY_BYTES};
pub use latency::worst_case;
pub use operation::{Operation, OperationId};
pub use policy::{ByTransient, KeyScope, Keyed, Keys, Policy, PolicyBuilder, Tuning, Unkeyed};
pub use priority::{Order, Priority};
pub use rejected::{FromRejected, Rejected};
pub use resil_spec::profiles;
pub use transient::Transient;
