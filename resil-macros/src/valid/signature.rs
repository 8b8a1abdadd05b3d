//! The annotated function's signature: an async fn returning a `Result`, or a stream of
//! results, and the names of its arguments.

use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{FnArg, Pat, ReturnType, Signature, Type};

use crate::errors::Errors;

/// Whether the function returns `Result<impl Stream<Item = …>, E>`, and `(T, E)` when the
/// items are `Result<T, E>`. Other items are reported: failures after the first item reach
/// the consumer as items, so they need the function's error type.
pub(super) fn stream_shape(sig: &Signature, errors: &mut Errors) -> (bool, Option<(Type, Type)>) {
    match stream_item(sig) {
        Some((item, error)) => (true, stream_types(item, error, errors)),
        // `fn … -> impl Stream`: reported by `check_signature`; its stream keys are not.
        None => (returns_bare_stream(sig), None),
    }
}

/// The `Item` type and `E` of `Result<impl Stream<Item = …>, E>`.
fn stream_item(sig: &Signature) -> Option<(&Type, &Type)> {
    let ReturnType::Type(_, output) = &sig.output else {
        return None;
    };
    let [ok, error] = generic_types(output, "Result")?;
    Some((stream_bound(ok)?, error))
}

/// The `Item` of `impl Stream<Item = …>`.
fn stream_bound(ty: &Type) -> Option<&Type> {
    let Type::ImplTrait(bounds) = ty else {
        return None;
    };
    bounds.bounds.iter().find_map(|bound| match bound {
        syn::TypeParamBound::Trait(bound) => {
            let last = bound.path.segments.last()?;
            if last.ident != "Stream" {
                return None;
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::AssocType(assoc) if assoc.ident == "Item" => Some(&assoc.ty),
                _ => None,
            })
        }
        _ => None,
    })
}

fn stream_types(item: &Type, error: &Type, errors: &mut Errors) -> Option<(Type, Type)> {
    let same_error =
        |ty: &Type| ty.to_token_stream().to_string() == error.to_token_stream().to_string();
    match generic_types(item, "Result") {
        Some([value, item_error]) if same_error(item_error) => Some((value.clone(), error.clone())),
        _ => {
            errors.push(
                item.span(),
                format!(
                    "the stream's items must be `Result<T, {}>`, with the function's error type: errors after the first item reach the consumer as items",
                    error.to_token_stream()
                ),
            );
            None
        }
    }
}

/// The two type arguments of `Name<A, B>`.
fn generic_types<'t>(ty: &'t Type, name: &str) -> Option<[&'t Type; 2]> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    Some([types.next()?, types.next()?])
}

fn returns_bare_stream(sig: &Signature) -> bool {
    matches!(&sig.output, ReturnType::Type(_, output) if stream_bound(output).is_some())
}

pub(super) fn check_signature(sig: &Signature, errors: &mut Errors) {
    if let ReturnType::Type(_, output) = &sig.output {
        if stream_bound(output).is_some() {
            errors.push(
                output.span(),
                "#[resilient] guards a stream through the call that opens it: write `async fn … -> Result<impl Stream<Item = Result<T, E>>, E>`, connect in the body and return `Ok(stream)`; the attribute retries until the first item and then hands the stream over",
            );
            return;
        }
    }
    if sig.asyncness.is_none() {
        errors.push(
            sig.fn_token.span,
            "#[resilient] goes on an `async fn`: each attempt re-runs the body and may be cut by a timeout, which needs a future; write `async fn`",
        );
    }
    match &sig.output {
        ReturnType::Default => errors.push(
            sig.paren_token.span.close(),
            "#[resilient] needs the function to return `Result<T, E>`: the error says whether a failure is worth retrying; add `-> Result<T, E>`",
        ),
        ReturnType::Type(_, ty) if result_type(ty).is_none() => errors.push(
            ty.span(),
            "#[resilient] needs the function to return `Result<T, E>` (or an alias whose name ends in `Result`): the error says whether a failure is worth retrying",
        ),
        ReturnType::Type(..) => {}
    }
}

/// The return type, if it is a `Result` or an alias named `...Result`.
fn result_type(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            last.ident.to_string().ends_with("Result").then_some(ty)
        }
        Type::Paren(inner) => result_type(&inner.elem),
        Type::Group(inner) => result_type(&inner.elem),
        _ => None,
    }
}

/// Whether `ty` is a reference, seen through parentheses and the invisible groups a
/// `macro_rules!` `$t:ty` leaves around it.
pub(crate) fn is_reference(ty: &Type) -> bool {
    match ty {
        Type::Reference(_) => true,
        Type::Paren(inner) => is_reference(&inner.elem),
        Type::Group(inner) => is_reference(&inner.elem),
        _ => false,
    }
}

/// The names bound directly by the function's arguments.
pub(super) fn argument_names(sig: &Signature) -> Vec<String> {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(arg) => match &*arg.pat {
                Pat::Ident(ident) => Some(ident.ident.to_string()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}
