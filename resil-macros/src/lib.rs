//! The procedural macros of [resil](https://docs.rs/resil): `#[resilient]` and
//! `#[derive(Transient)]`. Use them through the `resil` crate, which documents them. This
//! crate is a thin shim over `attr` (parsing, driven by the one key table in `keys`, whose
//! values `values` parses), `valid` (rules across keys and against the signature) and
//! `expand` (tokens; `expand/arguments` and `expand/docs` hold the argument copies and the
//! generated docs); `errors` collects every mistake of one attribute, `idents` renames an
//! identifier through tokens.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod attr;
mod errors;
mod expand;
mod idents;
mod keys;
mod transient;
mod valid;
mod values;

use proc_macro::TokenStream;

/// See `resil::resilient`.
#[proc_macro_attribute]
pub fn resilient(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::resilient(args.into(), item.into()).into()
}

/// See `resil::Transient`.
#[proc_macro_derive(Transient, attributes(transient))]
pub fn derive_transient(input: TokenStream) -> TokenStream {
    transient::derive(input.into()).into()
}
