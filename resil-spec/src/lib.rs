//! What a resil policy is made of, shared by the `#[resilient]` macro (at compile time) and
//! the runtime (at run time), so that a default, a rule and its sentence, a jitter's name or the
//! worst-case arithmetic is written once. No dependency: the macro's host build stays syn, quote, proc-macro2 and
//! this crate.
//!
//! ```
//! use resil_spec::{defaults, worst_case, Jitter};
//! use std::time::Duration;
//!
//! assert_eq!(Jitter::from_name("decorrelated"), Some(Jitter::Decorrelated));
//! assert_eq!(resil_spec::duration::parse("1m30s"), Ok(Duration::from_secs(90)));
//! let worst = worst_case(
//!     Some(Duration::from_secs(20)),
//!     None,
//!     2,
//!     (defaults::BACKOFF_BASE, defaults::BACKOFF_CAP),
//!     Jitter::Full,
//!     Duration::ZERO,
//! );
//! assert_eq!(worst, Some(Duration::from_millis(60_900)));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod breaker_kind;
pub mod defaults;
pub mod duration;
mod jitter;
pub mod keys;
pub mod names;
pub mod profiles;
pub mod rules;
mod worst_case;

pub use breaker_kind::{BreakerKind, WindowSize};
pub use jitter::Jitter;
pub use worst_case::{envelope, shortest_waits, worst_case};
