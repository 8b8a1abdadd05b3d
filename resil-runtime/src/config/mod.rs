//! Configuration at run time: every policy has a name (for `#[resilient]`, the function's
//! path, `billing::charge`); overrides for its limits and retries come from a TOML file and
//! from environment variables, are checked as a whole, and apply to new operations without a
//! restart. The attribute's (or the builder's) values are the defaults; a value in the file
//! overrides them, and a variable overrides the file.
//!
//! ```toml
//! ["billing::charge"]
//! timeout = "5s"
//! retry = 1
//! backoff = "200ms..2s"
//!
//! ["search::lookup"]
//! enabled = false   # straight to the body: no timeout, retry, breaker, bulkhead or gate
//!
//! ["partners::quote"]
//! profile = "partner_api"   # a built-in profile ("llm", ...) or one defined here
//! retry = 1                 # keys beside it override it
//!
//! [profiles.partner_api]
//! timeout = "2s"
//! retry = 3
//! backoff = "100ms..1s"
//! ```
//!
//! `RESIL_BILLING__CHARGE__TIMEOUT=3s` sets the same as a variable: the name's `::` become
//! `__`, and the key follows a last `__`.
//!
//! The keys: `profile`, `enabled`, `timeout`, `deadline`, `idle_timeout`, `retry`, `retry_after_max`,
//! `backoff`, `jitter`. Nothing applies unless everything is valid: a refused configuration
//! leaves every policy as it was, lists every problem at once (where, which key, the fix), and
//! is announced to the listeners as [`Event::ConfigRefused`](crate::events::Event). A policy
//! the configuration no longer mentions returns to its defaults. Operations in flight finish
//! under the tuning they started with.
//!
//! A watched file is read whole at each change, so write it the atomic way: the new version
//! beside it, then a rename over it (`mv`, `std::fs::rename`). `std::fs::write` and most
//! editors truncate first: an empty file is refused as a version caught mid-write (to set
//! nothing, leave a comment in it), and a half-written one is refused if it does not parse.
//!
//! Only a variable that names a policy is configuration: others that start with `RESIL_` belong
//! to other programs and are ignored (`RESIL_LOG`, `RESIL_CACHE__DIR`, `RESIL_HTTP_TIMEOUT`),
//! whatever they hold. A variable whose name is close to a policy's (a typo), and one not of
//! the form whose name with `_` for `::` is a policy's (`RESIL_BILLING_CHARGE_TIMEOUT`, a
//! misspelt override), are refused with the fix.
//!
//! A policy is known once it exists: a `#[resilient]` function's at its first call. A name in
//! the file that matches no policy yet is a problem (so a typo is caught), unless it is listed
//! as expected with [`Overrides::expect`]; a watched file is read again once a policy is built.
//!
//! A policy's tuning may change as often as a service likes: each change costs the same, and
//! a tuning no operation runs under any more is freed. A tuning set by hand
//! ([`Policy::set_tuning`](crate::Policy::set_tuning)) becomes the defaults the configuration
//! last applied is written over at once.

pub use crate::config_error::ConfigError;

#[cfg(feature = "config")]
mod overrides;

#[cfg(feature = "config")]
pub use overrides::{apply, load, watch, Overrides, Problem, Refused};
/// The task [`watch`] returns: abort it to stop watching.
#[cfg(feature = "config")]
pub use tokio::task::JoinHandle;
