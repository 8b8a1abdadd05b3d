//! How a call's execution starts: routed over its targets, on the state of its key, or on
//! the policy's own.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::valid::{Config, KeyArgument, KeyPart, KeyValue};

/// The expression that starts the call's execution: a route over its targets, the state of
/// its key (each part borrowed: see `__private::KeyProbe`), or the policy's own.
pub(super) fn execution(config: &Config) -> TokenStream {
    if let Some(route) = &config.route {
        let (argument, targets) = (&route.argument.ident, &route.targets);
        let targets = quote_spanned! {route.span=> #targets };
        return if route.argument.by_ref {
            quote! { ::resil::__private::route(&__RESIL_POLICY, #argument, #targets) }
        } else {
            quote! { ::resil::__private::route_owned(&__RESIL_POLICY, ::core::clone::Clone::clone(&#argument), #targets) }
        };
    }
    let Some(key) = &config.key else {
        return quote! { __RESIL_POLICY.execute() };
    };
    // The key is borrowed for the lookup: an argument declared as a reference as it is,
    // anything else by reference, and an expression whose value is a reference to a key
    // (`self.name()`) as the key it points to, so that it need not be `'static`
    // (`__private::KeyProbe`).
    let part = |part: &KeyPart| match part {
        KeyPart::Argument(KeyArgument {
            ident,
            by_ref: true,
        }) => quote! { #ident },
        KeyPart::Argument(KeyArgument { ident, .. }) => quote! { &#ident },
        KeyPart::Expr(expr) => {
            quote_spanned! {expr.span()=> ::resil::__private::KeyProbe(&(#expr)).resil_key() }
        }
    };
    let (call, parts) = match &key.value {
        KeyValue::One(one) => {
            let key = part(one);
            let call = quote! { ::resil::__private::keyed_execution(&__RESIL_POLICY, #key) };
            (call, std::slice::from_ref(one))
        }
        KeyValue::Tuple(parts) => {
            let key = parts.iter().map(part);
            let call = quote! { ::resil::__private::keyed_execution(&__RESIL_POLICY, &::resil::__private::KeyTuple((#(#key,)*))) };
            (call, &parts[..])
        }
    };
    if parts.iter().any(|part| matches!(part, KeyPart::Expr(_))) {
        quote! {{
            use ::resil::__private::{KeyByDeref as _, KeyByValue as _};
            #call
        }}
    } else {
        call
    }
}

/// What one attempt costs the token gate (`rate_cost = EXPR`): a bare number (`rate_cost = 10`)
/// as a count, not as the `i32` Rust would infer, which is no count.
pub(super) fn cost(cost: &syn::Expr) -> TokenStream {
    let units = match cost {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(int),
            ..
        }) if int.suffix().is_empty() => {
            let units = syn::LitInt::new(&format!("{}u64", int.base10_digits()), int.span());
            quote! { #units }
        }
        cost => quote! { #cost },
    };
    quote_spanned! {cost.span()=> ::resil::__private::cost(#units) }
}
