//! Parsing `#[resilient(...)]` into [`ResilientArgs`]: each value typed, each with the spans
//! of its key and value so later checks can point at the offending token.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, Meta, Token};

use resil_spec::{duration, Jitter};

use crate::errors::Errors;
use crate::keys::{did_you_mean, Kind, KEYS};

/// A value with where it was written.
pub(crate) struct Setting<T> {
    pub(crate) value: T,
    pub(crate) key: Span,
    pub(crate) span: Span,
}

/// `breaker = "..."`.
pub(crate) enum BreakerArg {
    /// One process-wide breaker with this name.
    Named(String),
    /// One breaker per value of this argument.
    PerArg(String),
}

/// Everything the attribute said, parsed but not yet checked across keys.
#[derive(Default)]
pub(crate) struct ResilientArgs {
    pub(crate) timeout: Option<Setting<Duration>>,
    pub(crate) deadline: Option<Setting<Duration>>,
    pub(crate) retry: Option<Setting<u32>>,
    pub(crate) retry_after_max: Option<Setting<Duration>>,
    pub(crate) backoff: Option<Setting<(Duration, Duration)>>,
    pub(crate) jitter: Option<Setting<Jitter>>,
    pub(crate) breaker: Option<Setting<BreakerArg>>,
    pub(crate) breaker_threshold: Option<Setting<u32>>,
    pub(crate) breaker_cooldown: Option<Setting<Duration>>,
    pub(crate) max_keys: Option<Setting<u32>>,
    pub(crate) bulkhead: Option<Setting<u32>>,
    pub(crate) fallback: Option<Setting<syn::Path>>,
    pub(crate) retry_budget: Option<Setting<Budget>>,
    pub(crate) independent: Option<Setting<bool>>,
}

/// `retry_budget = "20%, min 10/s"`.
#[derive(Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) percent: f64,
    pub(crate) min_per_sec: f64,
}

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
        let Some(&(_, kind)) = KEYS.iter().find(|(known, _)| *known == name) else {
            let hint = match did_you_mean(&name, KEYS.iter().map(|(known, _)| *known)) {
                Some(known) => format!("did you mean `{known}`?"),
                None => format!(
                    "the keys are {}",
                    KEYS.iter()
                        .map(|(k, _)| format!("`{k}`"))
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
        if let Err(error) = assign(&mut parsed, &name, kind, key.span(), &pair.value) {
            errors.push(error.span(), error);
        }
    }
    Ok(parsed)
}

fn assign(
    args: &mut ResilientArgs,
    name: &str,
    kind: Kind,
    key: Span,
    value: &Expr,
) -> syn::Result<()> {
    let span = value.span();
    match kind {
        Kind::Duration => {
            let duration = duration_value(name, value)?;
            let slot = match name {
                "timeout" => &mut args.timeout,
                "deadline" => &mut args.deadline,
                "retry_after_max" => &mut args.retry_after_max,
                "breaker_cooldown" => &mut args.breaker_cooldown,
                _ => unreachable!("`{name}` is not a duration key of the table"),
            };
            *slot = Some(Setting {
                value: duration,
                key,
                span,
            });
        }
        Kind::Count => {
            let count = count_value(name, value)?;
            let slot = match name {
                "retry" => &mut args.retry,
                "breaker_threshold" => &mut args.breaker_threshold,
                "max_keys" => &mut args.max_keys,
                "bulkhead" => &mut args.bulkhead,
                _ => unreachable!("`{name}` is not a count key of the table"),
            };
            *slot = Some(Setting {
                value: count,
                key,
                span,
            });
        }
        Kind::Range => {
            let text = string_value(name, value, "\"300ms..8s\"")?;
            let (base, cap) = text.split_once("..").ok_or_else(|| {
                syn::Error::new(span, format!("`backoff = \"{text}\"` is not a range: write it as \"base..cap\", such as \"300ms..8s\""))
            })?;
            let base = duration::parse(base).map_err(|m| syn::Error::new(span, m))?;
            let cap = duration::parse(cap).map_err(|m| syn::Error::new(span, m))?;
            if base.is_zero() {
                return Err(syn::Error::new(span, "the backoff's base is zero: retries would come back at once; give it a positive base, such as \"300ms..8s\""));
            }
            if base > cap {
                return Err(syn::Error::new(span, format!("the backoff's base `{}` is larger than its cap `{}`: write \"base..cap\" with base ≤ cap", duration::human(base), duration::human(cap))));
            }
            args.backoff = Some(Setting {
                value: (base, cap),
                key,
                span,
            });
        }
        Kind::Jitter => {
            let text = string_value(name, value, "\"full\"")?;
            let Some(jitter) = Jitter::from_name(&text) else {
                let names = Jitter::ALL.iter().map(|(known, _)| *known);
                let hint = did_you_mean(&text, names)
                    .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
                return Err(syn::Error::new(span, format!("unknown jitter \"{text}\"{hint}: use \"full\", \"equal\", \"decorrelated\" or \"none\"")));
            };
            args.jitter = Some(Setting {
                value: jitter,
                key,
                span,
            });
        }
        Kind::Breaker => {
            let text = string_value(name, value, "\"openai\" or \"per_model\"")?;
            let breaker = match text.strip_prefix("per_") {
                Some(arg) if !arg.is_empty() => BreakerArg::PerArg(arg.to_owned()),
                _ if text.trim().is_empty() => {
                    return Err(syn::Error::new(span, "a breaker needs a name, such as `breaker = \"openai\"`, or `breaker = \"per_<argument>\"` for one breaker per value of an argument"));
                }
                _ => BreakerArg::Named(text),
            };
            args.breaker = Some(Setting {
                value: breaker,
                key,
                span,
            });
        }
        Kind::Path => match value {
            Expr::Path(path) if path.qself.is_none() => {
                args.fallback = Some(Setting {
                    value: path.path.clone(),
                    key,
                    span,
                });
            }
            _ => {
                return Err(syn::Error::new(span, "`fallback` names an async fn taking the same arguments, such as `fallback = Self::cached_answer`"));
            }
        },
        Kind::Budget => {
            let text = string_value(name, value, "\"20%\"")?;
            let budget = parse_budget(&text).ok_or_else(|| {
                syn::Error::new(span, format!("`retry_budget = \"{text}\"` is not a budget: write the share of first attempts retries may add, such as \"20%\", optionally with a floor, such as \"20%, min 10/s\""))
            })?;
            args.retry_budget = Some(Setting {
                value: budget,
                key,
                span,
            });
        }
        Kind::Nested => {
            let text = string_value(name, value, "\"independent\"")?;
            let independent = match text.as_str() {
                "independent" => true,
                "shared" => false,
                _ => {
                    return Err(syn::Error::new(span, format!("unknown nesting \"{text}\": use \"independent\" to keep this call's own retry count inside another operation, or \"shared\" (the default) to draw from the operation's allowance")));
                }
            };
            args.independent = Some(Setting {
                value: independent,
                key,
                span,
            });
        }
    }
    Ok(())
}

/// `"20%"` or `"20%, min 10/s"`.
fn parse_budget(text: &str) -> Option<Budget> {
    let (share, floor) = match text.split_once(',') {
        Some((share, floor)) => (share, Some(floor)),
        None => (text, None),
    };
    let percent: f64 = share.trim().strip_suffix('%')?.trim().parse().ok()?;
    let min_per_sec = match floor {
        None => 0.0,
        Some(floor) => floor
            .trim()
            .strip_prefix("min")?
            .trim()
            .strip_suffix("/s")?
            .trim()
            .parse()
            .ok()?,
    };
    let valid = |n: f64| n.is_finite() && n >= 0.0;
    (valid(percent) && valid(min_per_sec)).then_some(Budget {
        percent,
        min_per_sec,
    })
}

fn string_value(name: &str, value: &Expr, example: &str) -> syn::Result<String> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Ok(text.value()),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{name}` takes a string, such as `{name} = {example}`"),
        )),
    }
}

fn duration_value(name: &str, value: &Expr) -> syn::Result<Duration> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(_), ..
    }) = value
    {
        return Err(syn::Error::new(value.span(), format!("`{name}` needs a unit: write it as a string such as `{name} = \"20s\"` or `\"300ms\"`")));
    }
    let text = string_value(name, value, "\"20s\"")?;
    let duration =
        duration::parse(&text).map_err(|message| syn::Error::new(value.span(), message))?;
    if duration.is_zero() {
        return Err(syn::Error::new(
            value.span(),
            format!(
                "`{name} = \"{text}\"` is zero: give it a positive duration, or remove `{name}`"
            ),
        ));
    }
    Ok(duration)
}

fn count_value(name: &str, value: &Expr) -> syn::Result<u32> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.base10_parse::<u32>().map_err(|_| {
            syn::Error::new(
                value.span(),
                format!("`{name}` takes a whole number from 0 to {}", u32::MAX),
            )
        }),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{name}` takes a whole number, such as `{name} = 2`"),
        )),
    }
}
