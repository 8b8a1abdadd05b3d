//! The `key` and the keyed settings: what a key may be, which argument or expression it is,
//! and which keys need one.

use quote::ToTokens;
use resil_spec::rules;
use syn::spanned::Spanned;
use syn::{FnArg, Pat, Signature};

use super::signature::{argument_names, is_reference};
use super::{KeyArgument, KeyPart, KeyValue, Keying};
use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs};
use crate::values::BreakerArg;

/// The function's key, from `key = <expr>` or `breaker = "per_<argument>"`, and the rules
/// of what is per key: one key per function, and a key only where something is per key.
pub(super) fn check_key(
    args: &ResilientArgs,
    sig: &Signature,
    errors: &mut Errors,
) -> Option<Keying> {
    let per_arg = args
        .breaker
        .as_ref()
        .and_then(|breaker| match &breaker.value {
            BreakerArg::PerArg(name) => Some((name, breaker.span)),
            BreakerArg::Named(_) => None,
        });
    let keying = match (&args.key, per_arg) {
        (Some(key), Some((name, span))) => {
            if name != "key" {
                errors.push(span, format!("`breaker = \"per_{name}\"` keys the breaker by `{name}`, but this function has `key = …`: one key per function; write `breaker = \"per_key\"` for a breaker per value of `key`"));
            }
            key_expression(&key.value, sig, errors)
        }
        (Some(key), None) => key_expression(&key.value, sig, errors),
        (None, Some((name, span))) => match key_argument(sig, name) {
            Some(argument) => Some(Keying {
                label: name.clone(),
                value: KeyValue::One(KeyPart::Argument(argument)),
            }),
            None => {
                let message = if name == "key" {
                    "`breaker = \"per_key\"` gives each key its own breaker, but the function has no key: add `key = <an expression over the arguments>`, such as `key = req.model`".to_owned()
                } else {
                    let names = argument_names(sig);
                    let hint = match did_you_mean(name, names.iter().map(String::as_str)) {
                        Some(arg) => format!("did you mean `per_{arg}`?"),
                        None if names.is_empty() => "the function takes no named argument".to_owned(),
                        None => format!(
                            "its arguments are {}; for a field or another expression, write `key = …` and `breaker = \"per_key\"`",
                            names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        ),
                    };
                    format!("`breaker = \"per_{name}\"` keys the breaker by the argument `{name}`, but the function has no such argument: {hint}")
                };
                errors.push(span, message);
                None
            }
        },
        (None, None) => None,
    };
    let keyed = args.key.is_some() || per_arg.is_some();
    let per_key = [
        (
            "bulkhead",
            args.bulkhead
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
        (
            "rate",
            args.rate
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
        (
            "token_rate",
            args.token_rate
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
    ];
    if !keyed {
        for (name, span) in per_key {
            if let Some(span) = span {
                errors.push(span, format!("`{name}` is per key, but the function has no key: add `key = <an expression over the arguments>`, such as `key = req.model`"));
            }
        }
        // `fair` holds the values that wait, bounded by `max_keys` as keys are.
        if let Some(max_keys) = args.max_keys.as_ref().filter(|_| args.fair.is_none()) {
            errors.push(max_keys.key, "`max_keys` bounds what is kept per key, but nothing is: add `key = …` with `breaker = \"per_key\"` (or `bulkhead = \"8 per key\"`, `rate = \"60/min per key\"`), or remove `max_keys`");
        }
    }
    if let Some(max_keys) = args
        .max_keys
        .as_ref()
        .filter(|_| keyed || args.fair.is_some())
    {
        errors.check(max_keys.span, rules::max_keys(max_keys.value as usize));
    }
    if let Some(key) = args.key.as_ref().filter(|_| errors.is_empty()) {
        if per_arg.is_none() && per_key.iter().all(|(_, span)| span.is_none()) {
            errors.push(key.key, "`key` scopes nothing: add `breaker = \"per_key\"`, or write ` per key` after a bulkhead or rate, such as `bulkhead = \"8 per key\"` or `rate = \"60/min per key\"`");
        }
    }
    keying
}

/// `key = model`, `key = req.model`, `key = (provider, model)`.
fn key_expression(expr: &syn::Expr, sig: &Signature, errors: &mut Errors) -> Option<Keying> {
    let part = |expr: &syn::Expr| match expr {
        syn::Expr::Path(path) if path.qself.is_none() => path
            .path
            .get_ident()
            .and_then(|ident| key_argument(sig, &ident.to_string()))
            .map_or_else(|| KeyPart::Expr(expr.clone()), KeyPart::Argument),
        _ => KeyPart::Expr(expr.clone()),
    };
    let value = match expr {
        syn::Expr::Lit(_) => {
            errors.push(expr.span(), "`key` is an expression over the arguments, such as `key = req.model` or `key = (provider, model)`: a literal would be the same key for every call");
            return None;
        }
        syn::Expr::Tuple(tuple) if !(2..=4).contains(&tuple.elems.len()) => {
            errors.push(
                expr.span(),
                "a key tuple has 2 to 4 parts, such as `key = (provider, model)`",
            );
            return None;
        }
        syn::Expr::Tuple(tuple) => KeyValue::Tuple(tuple.elems.iter().map(part).collect()),
        expr => KeyValue::One(part(expr)),
    };
    Some(Keying {
        label: label(expr),
        value,
    })
}

/// The expression as written, without the spaces token streams put around punctuation (and
/// `self` as written, where `#[async_trait]` made it `__self`).
fn label(expr: &syn::Expr) -> String {
    let text = crate::idents::renamed(expr.to_token_stream(), "__self", "self").to_string();
    [
        (" . ", "."),
        ("( ", "("),
        (" )", ")"),
        (" ,", ","),
        (" (", "("),
    ]
    .iter()
    .fold(text, |text, (from, to)| text.replace(from, to))
}

/// The queue needs a bulkhead; the token gate and its cost need each other.
pub(super) fn check_gate_keys(args: &ResilientArgs, errors: &mut Errors) {
    if let Some(queue) = &args.bulkhead_queue {
        if args.bulkhead.is_none() {
            errors.push(
                queue.key,
                "`bulkhead_queue` lets callers wait for a place in the bulkhead, but there is none: add `bulkhead = 8` (the calls in flight at once), or remove `bulkhead_queue`",
            );
        } else if queue.value == 0 {
            errors.push(
                queue.span,
                "`bulkhead_queue = 0` lets nobody wait, as if it were not there: give the number of callers that may wait for a place, such as 16, or remove it",
            );
        }
    }
    if let Some(learn) = &args.learn {
        if args.rate.is_none() && args.token_rate.is_none() {
            errors.push(
                learn.key,
                "`learn` makes the rate gates follow the provider's answers, but there is none: add `rate = \"60/min\"` (or `rate = \"auto\"`, which learns without a figure), or remove `learn`",
            );
        }
    }
    match (&args.token_rate, &args.rate_cost) {
        (Some(rate), None) => errors.push(
            rate.key,
            "`token_rate` weighs each attempt by its cost, which is missing: add `rate_cost = <an expression over the arguments>`, such as `rate_cost = req.max_tokens`",
        ),
        (None, Some(cost)) => errors.push(
            cost.key,
            "`rate_cost` says what an attempt costs the token gate, but there is none: add `token_rate = \"90000/min\"`, or remove `rate_cost`",
        ),
        _ => {}
    }
}

/// The keys that belong to streams, and `timeout`, which does not.
pub(super) fn check_stream_keys(args: &ResilientArgs, streaming: bool, errors: &mut Errors) {
    if streaming {
        if let Some(timeout) = &args.timeout {
            errors.push(
                timeout.key,
                "`timeout` would cut a stream that is still answering: this function streams, so bound it with `first_item_timeout` (to the first item, connect included), `idle_timeout` (between items) and `deadline` (to the last item)",
            );
        }
        if let (Some(hold), None) = (&args.commit_hold, &args.commit_when) {
            errors.push(
                hold.key,
                "`commit_hold` bounds the items held before the one `commit_when` names, but without `commit_when` the first item commits and nothing is held: add `commit_when = Chunk::has_content`, or remove `commit_hold`",
            );
        }
        return;
    }
    for (name, key) in [
        (
            "first_item_timeout",
            args.first_item_timeout.as_ref().map(|s| s.key),
        ),
        ("idle_timeout", args.idle_timeout.as_ref().map(|s| s.key)),
        ("complete_when", args.complete_when.as_ref().map(|s| s.key)),
        ("commit_when", args.commit_when.as_ref().map(|s| s.key)),
        ("commit_hold", args.commit_hold.as_ref().map(|s| s.key)),
    ] {
        if let Some(key) = key {
            let instead = if name.starts_with("commit") || name.ends_with("_when") {
                format!("remove `{name}`")
            } else {
                "use `timeout` for one call".to_owned()
            };
            errors.push(
                key,
                format!("`{name}` applies to a function that returns a stream, `Result<impl Stream<Item = Result<T, E>>, E>`; this one answers once: {instead}"),
            );
        }
    }
}

/// The argument bound to `name`, if the function has one.
pub(super) fn key_argument(sig: &Signature, name: &str) -> Option<KeyArgument> {
    sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(arg) => match &*arg.pat {
            Pat::Ident(ident) if ident.ident == name => Some(KeyArgument {
                ident: ident.ident.clone(),
                by_ref: is_reference(&arg.ty),
            }),
            _ => None,
        },
        FnArg::Receiver(_) => None,
    })
}
