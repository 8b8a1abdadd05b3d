//! Parsing `#[resilient(...)]` into [`ResilientArgs`]: each value typed, each with the spans
//! of its key and value so later checks can point at the offending token. What each key
//! accepts is in the table of `keys.rs`.

use proc_macro2::TokenStream;
use syn::parse::discouraged::Speculative;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Meta, MetaNameValue, Token};

use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs, KEYS};
use crate::values::Route;

/// Parses the attribute's arguments. A syntax error is fatal; every other mistake is
/// collected in `errors` and the setting left out, so later checks still run.
pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> syn::Result<ResilientArgs> {
    let metas = Punctuated::<Pair, Token![,]>::parse_terminated.parse2(args)?;
    let mut parsed = ResilientArgs::default();
    let mut seen: Vec<String> = Vec::new();
    for Pair(meta) in metas {
        let Meta::NameValue(pair) = &meta else {
            errors.push(
                meta.span(),
                "#[resilient] takes `key = value` pairs, such as `timeout = \"20s\", retry = 2`",
            );
            continue;
        };
        let Some(key) = pair.path.get_ident() else {
            errors.push(
                pair.path.span(),
                "a key is a single name, such as `timeout`",
            );
            continue;
        };
        let name = key.to_string();
        let Some(known) = KEYS.iter().find(|known| known.name == name) else {
            let hint = match did_you_mean(&name, KEYS.iter().map(|known| known.name)) {
                Some(known) => format!("did you mean `{known}`?"),
                None => format!(
                    "the keys are {}",
                    resil_spec::keys::KEYS
                        .iter()
                        .map(|known| format!("`{}` ({})", known.name, known.summary))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            errors.push(key.span(), format!("unknown key `{name}`: {hint}"));
            continue;
        };
        if seen.contains(&name) {
            errors.push(key.span(), format!("`{name}` is given twice: keep one"));
            continue;
        }
        seen.push(name.clone());
        if let Err(error) = (known.assign)(&mut parsed, key.span(), &pair.value) {
            errors.push(error.span(), error);
        }
    }
    Ok(parsed)
}

/// One item of the attribute. `route`'s value, `model in [...]`, is no expression: it is
/// kept as its tokens, up to the next comma outside brackets, for `values::route` to read.
struct Pair(Meta);

impl Parse for Pair {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if !(input.peek(syn::Ident) && input.peek2(Token![=]) && !input.peek2(Token![==])) {
            return input.parse().map(Pair);
        }
        let key: syn::Ident = input.parse()?;
        let eq_token = input.parse()?;
        let value = if key == "route" {
            // Parsed as `ARG in EXPR` where it is one (a comma in a generic list stays in the
            // expression); otherwise the tokens up to the next comma, for the key's error.
            let fork = input.fork();
            match fork.parse::<Route>() {
                Ok(Route { argument, targets }) if fork.is_empty() || fork.peek(Token![,]) => {
                    input.advance_to(&fork);
                    Expr::Verbatim(quote::quote! { #argument in #targets })
                }
                _ => {
                    let mut tokens = TokenStream::new();
                    while !input.is_empty() && !input.peek(Token![,]) {
                        tokens.extend([input.parse::<proc_macro2::TokenTree>()?]);
                    }
                    Expr::Verbatim(tokens)
                }
            }
        } else {
            input.parse()?
        };
        Ok(Pair(Meta::NameValue(MetaNameValue {
            path: key.into(),
            eq_token,
            value,
        })))
    }
}
