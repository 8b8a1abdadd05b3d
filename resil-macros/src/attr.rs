//! Parsing `#[resilient(...)]` into [`ResilientArgs`]: each value typed, each with the spans
//! of its key and value so later checks can point at the offending token. What each key
//! accepts is in the table of `keys.rs`.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Meta, Token};

use crate::errors::Errors;
use crate::keys::{did_you_mean, ResilientArgs, KEYS};

/// Parses the attribute's arguments. A syntax error is fatal; every other mistake is
/// collected in `errors` and the setting left out, so later checks still run.
pub(crate) fn parse(args: TokenStream, errors: &mut Errors) -> syn::Result<ResilientArgs> {
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    let mut parsed = ResilientArgs::default();
    let mut seen: Vec<String> = Vec::new();
    for meta in metas {
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
