//! `priority = ARG` and `fair = ARG`: which argument orders the callers that wait, and what
//! they wait for.

use resil_spec::rules;
use syn::spanned::Spanned;
use syn::{Expr, Signature};

use super::keys::key_argument;
use super::signature::argument_names;
use super::KeyArgument;
use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs, Setting};

/// The argument `priority` names, and the one `fair` names, each checked: an argument of the
/// function, and something whose waiters it orders: the rate gate, the bulkhead queue or the
/// token gate, of all calls or per key.
pub(super) fn check_priority(
    args: &ResilientArgs,
    sig: &Signature,
    errors: &mut Errors,
) -> (Option<KeyArgument>, Option<KeyArgument>) {
    let priority = args
        .priority
        .as_ref()
        .and_then(|setting| argument("priority", "class", setting, sig, errors));
    let fair = args
        .fair
        .as_ref()
        .and_then(|setting| argument("fair", "tenant", setting, sig, errors));
    let rate = args.rate.as_ref().map(|rate| &rate.value);
    let learn = args.learn.as_ref().is_some_and(|l| l.value);
    let shared = args.shared.as_ref().is_some_and(|s| s.value);
    // A shared token gate's units are asked of the store with the request gate's slot, in
    // the request gate's turn; alone, the token gate holds the turn.
    let tokens = args.token_rate.as_ref().map(|rate| &rate.value);
    let tokens_learn = tokens.is_some_and(|tokens| tokens.learn) || learn;
    let ordered = rate.is_some() || args.bulkhead_queue.is_some() || tokens.is_some();
    // A gate or queue left out for a mistake of its own is not missing.
    if !errors.is_empty() {
        return (priority, fair);
    }
    for (setting, name, what) in [
        (args.priority.as_ref().map(|s| s.key), "priority", "orders the callers waiting for a gate's next slot or the bulkhead queue's next place"),
        (args.fair.as_ref().map(|s| s.key), "fair", "serves the callers waiting for a gate's slot or the bulkhead queue's place in turn across its argument's values"),
    ] {
        let Some(key) = setting.filter(|_| !ordered) else {
            continue;
        };
        errors.push(key, format!("`{name}` {what}, but nobody waits here: add `rate = \"60/min\"` or `bulkhead = 8, bulkhead_queue = 32`, or remove `{name}`"));
    }
    let learns = rate.is_some_and(|rate| rate.learn) || learn;
    let ordering = [args.priority.as_ref(), args.fair.as_ref()];
    let setting = ordering.into_iter().flatten().next();
    let learning = (rate.map(|_| learns), tokens.map(|_| tokens_learn));
    let turn = rules::ordered_turn(setting.is_some(), shared, learning.0, learning.1);
    if let (Err(_), Some(setting)) = (turn, setting) {
        let gate = if rate.is_some() { "rate" } else { "token" };
        errors.push(setting.key, format!("a shared {gate} gate that learns the provider's limits (`learn = true`, `\"auto\"`) serves its waiters in arrival order: ordering them by `priority` or `fair` is not implemented for it yet (issue 47); declare the {gate} gate without learning, do not share it, or remove this key"));
    }
    let learnt_share = |key: &str| {
        format!("a batch share is a share of the gate's declared capacity, but this gate learns the provider's limits, and its capacity is theirs, which no declared figure states: declare `{key}` without learning, or remove `, batch N%`")
    };
    if let Some(rate) = args.rate.as_ref().filter(|rate| rate.value.batch.is_some()) {
        if learns {
            errors.push(rate.span, learnt_share("rate"));
        } else if rate.value.per_key {
            errors.push(rate.span, "a batch share is a share of the rate gate of all calls, but this gate is per key, and a share per key is not implemented yet (issue 47): drop `per key`, or remove `, batch N%`");
        } else if args.priority.is_none() {
            errors.push(rate.span, "a batch share keeps calls of class `Batch` to their share, but no call has a class here: add `priority = class` (an argument of type `resil::Priority`), or remove `, batch N%`");
        }
    }
    if let Some(tokens) = args.token_rate.as_ref().filter(|t| t.value.batch.is_some()) {
        if tokens.value.per_key {
            errors.push(tokens.span, "a batch share is a share of the token gate of all calls, but this gate is per key, and a share per key is not implemented yet (issue 47): drop `per key`, or remove `, batch N%`");
        } else if tokens_learn {
            errors.push(tokens.span, learnt_share("token_rate"));
        } else if shared {
            errors.push(tokens.span, "a batch share holds batch calls back in the token gate's waiting room, but this token gate is shared, and a share of a shared token gate is not implemented yet (issue 47): declare it unshared, or remove `, batch N%`");
        } else if args.priority.is_none() {
            errors.push(tokens.span, "a batch share keeps calls of class `Batch` to their share, but no call has a class here: add `priority = class` (an argument of type `resil::Priority`), or remove `, batch N%`");
        }
    }
    (priority, fair)
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
