//! An identifier renamed throughout a token stream, macro arguments included: `self` for a
//! body that may run more than once, or in a method `#[async_trait]` rewrote, whose receiver
//! it moved to `__self` (and back, for a key's label as written).

use proc_macro2::{Group, Ident, TokenStream, TokenTree};

/// `tokens` with every identifier `from` named `to` instead, but for a path's first segment
/// (`self::audit`: the module, not the receiver).
pub(crate) fn renamed(tokens: TokenStream, from: &str, to: &str) -> TokenStream {
    let mut tokens = tokens.into_iter().peekable();
    let mut out = Vec::new();
    while let Some(token) = tokens.next() {
        let path = matches!(tokens.peek(), Some(TokenTree::Punct(punct)) if punct.as_char() == ':');
        out.push(match token {
            TokenTree::Ident(ident) if ident == from && !path => {
                TokenTree::Ident(Ident::new(to, ident.span()))
            }
            TokenTree::Group(group) => {
                let mut inner = Group::new(group.delimiter(), renamed(group.stream(), from, to));
                inner.set_span(group.span());
                TokenTree::Group(inner)
            }
            other => other,
        });
    }
    out.into_iter().collect()
}
