//! An identifier renamed throughout a token stream, macro arguments included: `self` for a
//! body that may run more than once, or in a method `#[async_trait]` rewrote, whose receiver
//! it moved to `__self` (and back, for a key's label as written).

use proc_macro2::{Group, Ident, TokenStream, TokenTree};

/// `tokens` with every identifier `from` named `to` instead.
pub(crate) fn renamed(tokens: TokenStream, from: &str, to: &str) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            TokenTree::Ident(ident) if ident == from => {
                TokenTree::Ident(Ident::new(to, ident.span()))
            }
            TokenTree::Group(group) => {
                let mut inner = Group::new(group.delimiter(), renamed(group.stream(), from, to));
                inner.set_span(group.span());
                TokenTree::Group(inner)
            }
            other => other,
        })
        .collect()
}
