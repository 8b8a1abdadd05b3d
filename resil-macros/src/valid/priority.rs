//! `priority = ARG` and `fair = ARG`: which argument orders the callers that wait, and what
//! they wait for.

use syn::spanned::Spanned;
use syn::{Expr, Signature};

use super::keys::key_argument;
use super::signature::argument_names;
use super::KeyArgument;
use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs, Setting};

/// The argument `priority` names, and the one `fair` names, each checked: an argument of the
/// function, and something whose waiters it orders (a rate gate or a bulkhead queue). `fair`
/// is refused for now, once it is right: its round-robin is not implemented yet.
pub(super) fn check_priority(
    args: &ResilientArgs,
    sig: &Signature,
    errors: &mut Errors,
) -> Option<KeyArgument> {
    let priority = args
        .priority
        .as_ref()
        .and_then(|setting| argument("priority", "class", setting, sig, errors));
    if let Some(setting) = &args.fair {
        argument("fair", "tenant", setting, sig, errors);
    }
    let gate = args.rate.is_some() || args.token_rate.is_some();
    let queue = args.bulkhead_queue.is_some();
    // A gate or queue left out for a mistake of its own is not missing.
    if !errors.is_empty() {
        return priority;
    }
    if let Some(setting) = &args.priority {
        if args.rate.is_none() && !queue {
            errors.push(setting.key, "`priority` orders the callers waiting for the rate gate's next slot or the bulkhead queue's next place, but nobody waits here: add `rate = \"60/min\"` or `bulkhead = 8, bulkhead_queue = 32`, or remove `priority`");
        }
    }
    if let Some(setting) = &args.fair {
        if !gate && !queue {
            errors.push(setting.key, "`fair` serves the callers waiting for a gate's slot or a bulkhead queue's place in turn across its argument's values, but nobody waits here: add `rate = \"60/min\"` or `bulkhead = 8, bulkhead_queue = 32`, or remove `fair`");
        } else {
            errors.push(setting.key, "`fair` is not implemented yet (issue 47): waiters are served by `priority`, in arrival order within a class; remove `fair`");
        }
    }
    for rate in [&args.rate, &args.token_rate].into_iter().flatten() {
        if rate.value.batch.is_some() {
            errors.push(rate.span, "a batch share (`, batch 80%`) is not implemented yet (issue 47): batch calls are served after the others that wait, with aging; remove `, batch N%`");
        }
    }
    priority
}

/// The argument `name = ARG` names: `example` shows one.
fn argument(
    name: &str,
    example: &str,
    setting: &Setting<Expr>,
    sig: &Signature,
    errors: &mut Errors,
) -> Option<KeyArgument> {
    let ident = match &setting.value {
        Expr::Path(path) if path.qself.is_none() => path.path.get_ident(),
        _ => None,
    };
    let Some(ident) = ident else {
        errors.push(
            setting.value.span(),
            format!("`{name}` names an argument of the function, such as `{name} = {example}`: for a field or another expression, pass it as an argument of its own"),
        );
        return None;
    };
    let found = key_argument(sig, &ident.to_string());
    if found.is_none() {
        let names = argument_names(sig);
        let hint = match did_you_mean(&ident.to_string(), names.iter().map(String::as_str)) {
            Some(known) => format!("did you mean `{known}`?"),
            None if names.is_empty() => "the function takes no named argument".to_owned(),
            None => format!(
                "its arguments are {}",
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        errors.push(
            ident.span(),
            format!("`{name} = {ident}` names no argument of the function: {hint}"),
        );
    }
    found
}
