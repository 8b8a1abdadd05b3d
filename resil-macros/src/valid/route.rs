//! `route = model in [...]`: the routed argument must be one of the function's, and any state
//! kept per key must be kept per value of that argument, since each target is one.

use syn::spanned::Spanned;
use syn::Signature;

use super::keys::key_argument;
use super::signature::argument_names;
use super::{KeyPart, KeyValue, Keying, Route};
use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs};

pub(super) fn check_route(
    args: &ResilientArgs,
    sig: &Signature,
    key: Option<&Keying>,
    errors: &mut Errors,
) -> Option<Route> {
    let route = args.route.as_ref()?;
    let name = route.value.argument.to_string();
    let Some(argument) = key_argument(sig, &name) else {
        let names = argument_names(sig);
        let hint = match did_you_mean(&name, names.iter().map(String::as_str)) {
            Some(arg) => format!("did you mean `{arg}`?"),
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
            route.value.argument.span(),
            format!("`route = {name} in [...]` sends each attempt to a value of the argument `{name}`, but the function has no such argument: {hint}"),
        );
        return None;
    };
    if let Some(key) = key {
        let same =
            matches!(&key.value, KeyValue::One(KeyPart::Argument(keyed)) if keyed.ident == name);
        if !same {
            errors.push(
                route.value.argument.span(),
                format!("`route = {name} in [...]` makes each value of `{name}` a target with its own breaker, bulkhead and gates, but the state per key is per `{}`: key it by the routed argument (`breaker = \"per_{name}\"`), or route by the key's argument", key.label),
            );
            return None;
        }
    }
    Some(Route {
        argument,
        targets: route.value.targets.clone(),
        span: route.value.targets.span(),
    })
}
