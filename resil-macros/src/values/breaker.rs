//! The values of the breaker's keys: its name, kind, share and window.

use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit};

use resil_spec::WindowSize;

use super::{count_value, duration_value, string_value};
use crate::keys::did_you_mean;

/// `breaker = "..."`.
pub(crate) enum BreakerArg {
    /// One process-wide breaker with this name.
    Named(String),
    /// One breaker per value of this argument.
    PerArg(String),
}

/// The name in `breaker_kind = "..."`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum KindName {
    Consecutive,
    FailureRate,
    SlowCall,
}

impl KindName {
    const ALL: [(&'static str, KindName); 3] = [
        ("consecutive", KindName::Consecutive),
        ("failure_rate", KindName::FailureRate),
        ("slow_call", KindName::SlowCall),
    ];

    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("", |(name, _)| name)
    }
}

/// `breaker = "openai"` or `breaker = "per_model"`.
pub(crate) fn breaker(name: &'static str, value: &Expr) -> syn::Result<BreakerArg> {
    let text = string_value(name, value, &["\"openai\"", "\"per_model\""])?;
    match text.strip_prefix("per_") {
        Some(arg) if !arg.is_empty() => Ok(BreakerArg::PerArg(arg.to_owned())),
        _ if text.trim().is_empty() => Err(syn::Error::new(value.span(), "a breaker needs a name, such as `breaker = \"openai\"`, or `breaker = \"per_<argument>\"` for one breaker per value of an argument")),
        _ => Ok(BreakerArg::Named(text)),
    }
}

/// `breaker_kind = "failure_rate"`.
pub(crate) fn breaker_kind(name: &'static str, value: &Expr) -> syn::Result<KindName> {
    let text = string_value(name, value, &["\"failure_rate\""])?;
    let known = KindName::ALL.iter();
    known.clone().find(|(known, _)| *known == text).map(|(_, kind)| *kind).ok_or_else(|| {
        let hint = did_you_mean(&text, known.map(|(name, _)| *name))
            .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
        syn::Error::new(value.span(), format!("unknown breaker kind \"{text}\"{hint}: use \"consecutive\" (the default), \"failure_rate\" or \"slow_call\""))
    })
}

/// `breaker_rate = "25%"`: a whole percentage.
pub(crate) fn percent(name: &'static str, value: &Expr) -> syn::Result<u32> {
    let text = string_value(name, value, &["\"25%\""])?;
    text.trim()
        .strip_suffix('%')
        .and_then(|percent| percent.trim().parse().ok())
        .ok_or_else(|| syn::Error::new(value.span(), format!("`{name} = \"{text}\"` is not a share: write a whole percentage, such as \"25%\"")))
}

/// `breaker_window = 20` (the last calls) or `breaker_window = "30s"` (the last so long).
pub(crate) fn window(name: &'static str, value: &Expr) -> syn::Result<WindowSize> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(_), ..
        }) => duration_value(name, value).map(WindowSize::Time),
        Expr::Lit(ExprLit {
            lit: Lit::Int(_), ..
        }) => count_value(name, value).map(WindowSize::Calls),
        _ => Err(syn::Error::new(
            value.span(),
            format!(
                "`{name}` takes a number of calls or a time: `{name} = 20` or `{name} = \"30s\"`"
            ),
        )),
    }
}
