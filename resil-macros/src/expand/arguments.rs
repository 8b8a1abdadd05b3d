//! The function's arguments across attempts: each attempt gets its own copy of a by-value
//! argument, and a body taking `self` by value uses the attempt's copy.

use proc_macro2::{Ident, TokenStream, TokenTree};
use quote::{quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{FnArg, Pat};

use crate::idents::renamed;

use crate::valid::is_reference;

/// `let name = clone_for_retry(&name);` for each argument taken by value, spanned at its
/// type so a missing `Clone` is reported there.
pub(super) fn clones(sig: &syn::Signature) -> TokenStream {
    let generics: Vec<_> = sig
        .generics
        .type_params()
        .map(|param| &param.ident)
        .collect();
    let mut clones = TokenStream::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver)
                if receiver.reference.is_none() && !is_reference(&receiver.ty) =>
            {
                clones.extend(quote_spanned! {receiver.self_token.span=>
                    let __resil_self = ::resil::__private::clone_for_retry(&self);
                });
            }
            FnArg::Typed(arg) if !is_reference(&arg.ty) => {
                let ty = &arg.ty;
                // The bound a generic type fails is one rustc suggests adding to it: `Clone`,
                // not the private trait whose message reads better for a concrete type.
                let clone = if is_generic(ty.to_token_stream(), &generics) {
                    quote_spanned! {ty.span()=> clone_generic_for_retry }
                } else {
                    quote_spanned! {ty.span()=> clone_for_retry }
                };
                for (ident, mutability) in bindings(&arg.pat) {
                    clones.extend(quote_spanned! {ty.span()=>
                        let #mutability #ident = ::resil::__private::#clone(&#ident);
                    });
                }
            }
            _ => {}
        }
    }
    clones
}

/// Whether a type names a type parameter of the function, `impl Trait` or `Self`, or one
/// named as type parameters are (`T`, `B`, `K2`): the `impl`'s, which the attribute cannot see.
fn is_generic(ty: TokenStream, generics: &[&Ident]) -> bool {
    ty.into_iter().any(|token| match token {
        TokenTree::Ident(ident) => {
            ident == "impl"
                || ident == "Self"
                || generics.iter().any(|param| **param == ident)
                || named_as_a_parameter(&ident.to_string())
        }
        TokenTree::Group(group) => is_generic(group.stream(), generics),
        _ => false,
    })
}

/// A capital letter, perhaps with a digit or another capital: how type parameters are named.
fn named_as_a_parameter(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|first| first.is_ascii_uppercase())
        && name.len() <= 2
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// `mut text: String` now mutates each attempt's copy, not the argument itself: keep the
/// `mut` as written, without the warning it would draw.
pub(super) fn allow_unused_mut(sig: &mut syn::Signature) {
    for input in &mut sig.inputs {
        if let FnArg::Typed(arg) = input {
            if !is_reference(&arg.ty) && bindings(&arg.pat).iter().any(|(_, m)| m.is_some()) {
                arg.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
            }
        }
    }
}

pub(super) fn takes_self_by_value(sig: &syn::Signature) -> bool {
    sig.inputs.iter().any(|input| {
        matches!(input, FnArg::Receiver(receiver) if receiver.reference.is_none() && !is_reference(&receiver.ty))
    })
}

/// The names a pattern binds, with their `mut`.
fn bindings(pat: &Pat) -> Vec<(Ident, Option<syn::token::Mut>)> {
    match pat {
        Pat::Ident(ident) => {
            let mut names = vec![(ident.ident.clone(), ident.mutability)];
            if let Some((_, sub)) = &ident.subpat {
                names.extend(bindings(sub));
            }
            names
        }
        Pat::Tuple(tuple) => tuple.elems.iter().flat_map(bindings).collect(),
        Pat::TupleStruct(tuple) => tuple.elems.iter().flat_map(bindings).collect(),
        Pat::Struct(fields) => fields
            .fields
            .iter()
            .flat_map(|field| bindings(&field.pat))
            .collect(),
        Pat::Slice(slice) => slice.elems.iter().flat_map(bindings).collect(),
        Pat::Reference(reference) => bindings(&reference.pat),
        Pat::Paren(paren) => bindings(&paren.pat),
        Pat::Type(typed) => bindings(&typed.pat),
        _ => Vec::new(),
    }
}

/// Points `self` at the attempt's clone, `__resil_self`, in a body that takes `self` by
/// value and may run more than once. Nested items have their own `self` and are skipped.
pub(super) struct ReplaceSelf;

impl VisitMut for ReplaceSelf {
    fn visit_expr_path_mut(&mut self, expr: &mut syn::ExprPath) {
        if expr.qself.is_none() && expr.path.is_ident("self") {
            let span = expr.path.span();
            expr.path = Ident::new("__resil_self", span).into();
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}

    fn visit_macro_mut(&mut self, mac: &mut syn::Macro) {
        mac.tokens = renamed(std::mem::take(&mut mac.tokens), "self", "__resil_self");
    }
}
