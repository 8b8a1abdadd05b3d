//! `hedge = "1 after 800ms"`: the rule every hedge follows (`resil_spec::rules::hedge`), and
//! what the racers need of the body: they run side by side, so none may hold a `&mut`.

use std::time::Duration;

use resil_spec::rules;
use syn::spanned::Spanned;
use syn::{FnArg, Signature, Type};

use crate::errors::Errors;
use crate::keys::ResilientArgs;
use crate::values::Hedge;

pub(super) fn check_hedge(
    args: &ResilientArgs,
    sig: &Signature,
    timeout: Option<Duration>,
    errors: &mut Errors,
) -> Option<Hedge> {
    let hedge = args.hedge.as_ref()?;
    let retry = args.retry.as_ref().map_or(0, |retry| retry.value);
    let Hedge { count, delay } = hedge.value;
    let checked = rules::hedge(count, delay, timeout, retry);
    if let Err(violation) = &checked {
        errors.push(hedge.span, violation.to_string());
    }
    for input in &sig.inputs {
        let mutable = match input {
            FnArg::Receiver(receiver) => {
                receiver.reference.is_some() && receiver.mutability.is_some()
            }
            FnArg::Typed(arg) => matches!(&*arg.ty, Type::Reference(r) if r.mutability.is_some()),
        };
        if mutable {
            errors.push(
                input.span(),
                "`hedge` runs racing attempts side by side in the caller's task, and each would need this `&mut` borrow at once: take `&self` (with interior mutability for what changes), or remove `hedge`",
            );
        }
    }
    checked.ok().map(|()| hedge.value)
}
