//! `transient = path` and `rejected = path`: what decides for the error type, and what makes
//! it from resil's own failures.

use crate::errors::Errors;
use crate::keys::ResilientArgs;

/// `transient` does not apply to a streaming function, and `rejected` goes with `transient`.
pub(super) fn check_classifier(args: &ResilientArgs, streaming: bool, errors: &mut Errors) {
    if let (true, Some(transient)) = (streaming, &args.transient) {
        errors.push(
            transient.key,
            "`transient` does not apply to a streaming function: its errors also reach the caller inside the stream, where resil asks the error type itself; implement `Transient` for the error type (for a type of another crate, on a wrapper of your own: `struct ApiError(Status)` with `From<resil::Rejected>`), or return `Box<dyn std::error::Error + Send + Sync>`, which resil classifies by its chain",
        );
    }
    match (&args.transient, &args.rejected) {
        (None, Some(rejected)) if streaming => errors.push(
            rejected.key,
            "`rejected` goes with `transient`, which does not apply to a streaming function: implement `Transient` and `From<resil::Rejected>` for the error type (for a type of another crate, on a wrapper of your own), and remove `rejected`",
        ),
        (None, Some(rejected)) => errors.push(
            rejected.key,
            "`rejected` says how resil's failures become an error type that `transient = ...` judges: add `transient = classify` (`fn(&E) -> bool`), or remove `rejected` and implement `From<resil::Rejected>` for the error type",
        ),
        _ => {}
    }
}
