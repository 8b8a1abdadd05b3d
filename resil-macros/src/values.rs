//! The value of each kind of key, parsed from the attribute's tokens: durations with units,
//! counts, ranges, names. Each parser says what the value should look like when it is not.

use std::time::Duration;

use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit};

use resil_spec::profiles::{self, Profile};
use resil_spec::{duration, rules, Jitter};

use crate::keys::did_you_mean;

mod breaker;

pub(crate) use breaker::{breaker, breaker_kind, percent, window, BreakerArg, KindName};

/// `retry_budget = "20%, min 10/s"`.
#[derive(Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) percent: f64,
    pub(crate) min_per_sec: f64,
}

/// `rate = "60/min"` or `"10/s, burst 20"`: a count per period, and how many at once.
#[derive(Clone, Copy)]
pub(crate) struct Rate {
    pub(crate) count: u64,
    pub(crate) period: Duration,
    pub(crate) burst: u64,
    /// `"10/s, exact"`: the provider's limit exactly; a 429 does not slow the gate down.
    pub(crate) exact: bool,
    /// `"60/min per key"`: one gate per value of the key.
    pub(crate) per_key: bool,
    /// `"auto"`: no figure declared; the gate learns the provider's from its answers.
    pub(crate) auto: bool,
    /// `"auto"`, or `learn = true`: the gate follows what the provider's answers say.
    pub(crate) learn: bool,
    /// `"500/min, batch 80%"`: the share of the gate batch calls may take while others wait.
    pub(crate) batch: Option<u32>,
}

/// `bulkhead = 8`, `bulkhead = "8 per key"`, `bulkhead = "adaptive 4..64"`.
#[derive(Clone, Copy)]
pub(crate) struct Bulkhead {
    pub(crate) size: BulkheadSize,
    pub(crate) per_key: bool,
}

/// A bulkhead's limit: fixed, or adapting between two bounds.
#[derive(Clone, Copy)]
pub(crate) enum BulkheadSize {
    Fixed(u32),
    Adaptive(usize, usize),
}

const PER_KEY: &str = "per key";

/// The text without a final `per key`, and whether it had one; `None` when `per key` is
/// written elsewhere than last.
fn per_key(text: &str) -> Option<(&str, bool)> {
    let text = text.trim();
    match text.strip_suffix(PER_KEY) {
        Some(rest) => {
            let rest = rest.trim_end();
            let rest = rest.strip_suffix(',').unwrap_or(rest).trim_end();
            (!rest.contains(PER_KEY)).then_some((rest, true))
        }
        None => (!text.contains(PER_KEY)).then_some((text, false)),
    }
}

/// `rate = "60/min"`, `token_rate = "90000/min, burst 20000"`, or `"auto"`, any with
/// ` per key`.
pub(crate) fn rate(name: &'static str, value: &Expr) -> syn::Result<Rate> {
    let text = string_value(name, value, &["\"60/min\"", "\"auto\""])?;
    let Some((rate, per_key)) = per_key(&text) else {
        return Err(syn::Error::new(
            value.span(),
            format!("`per key` goes last: write `{name} = \"60/min, burst 10 per key\"`"),
        ));
    };
    if rate.starts_with("auto") && rate != "auto" {
        return Err(syn::Error::new(
            value.span(),
            format!("`{name} = \"auto\"` takes no burst and no `exact`: the provider's answers set the pace; write `{name} = \"auto\"` (with ` per key` for a gate per key), or declare a rate with `learn = true`, such as `{name} = \"10/s, burst 5\", learn = true`"),
        ));
    }
    if rate == "auto" {
        return Ok(Rate {
            count: 0,
            period: Duration::ZERO,
            burst: 0,
            exact: false,
            per_key,
            auto: true,
            learn: true,
            batch: None,
        });
    }
    let rate = parse_rate(name, rate, per_key).ok_or_else(|| {
        syn::Error::new(value.span(), format!("`{name} = \"{text}\"` is not a rate: write a count per `s`, `min` or `h`, such as \"60/min\", optionally with a burst, such as \"10/s, burst 20\", `, exact` for a limit known exactly (a 429 does not slow the gate), and ` per key` for a gate per key; or \"auto\" to learn the provider's limit from its answers"))
    })?;
    rules::rate(name, rate.count, rate.period, rate.burst)
        .map_err(|rule| syn::Error::new(value.span(), rule))?;
    if let Some(share) = rate.batch.filter(|share| !(1..=99).contains(share)) {
        return Err(syn::Error::new(
            value.span(),
            format!("`batch {share}%` is the share of the gate batch calls may take while others come: give a share from 1 % to 99 %, such as `{name} = \"500/min, batch 80%\"` (without it, batch calls may take the whole gate)"),
        ));
    }
    Ok(rate)
}

/// `bulkhead = 8`, `bulkhead = "8 per key"`, `bulkhead = "adaptive"` or
/// `bulkhead = "adaptive 4..64"`, the last two with ` per key` too.
pub(crate) fn bulkhead(name: &'static str, value: &Expr) -> syn::Result<Bulkhead> {
    let Expr::Lit(ExprLit {
        lit: Lit::Str(text),
        ..
    }) = value
    else {
        let limit = count_value(name, value)?;
        return Ok(Bulkhead {
            size: BulkheadSize::Fixed(limit),
            per_key: false,
        });
    };
    let text = text.value();
    let error = |message: String| syn::Error::new(value.span(), message);
    let Some((size, per_key)) = per_key(&text) else {
        return Err(error(format!(
            "`{name} = \"{text}\"`: write `per key` last, such as `{name} = \"8 per key\"`"
        )));
    };
    let size = match size.strip_prefix("adaptive") {
        Some("") => {
            let (min, max) = resil_spec::defaults::ADAPTIVE_BULKHEAD;
            BulkheadSize::Adaptive(min, max)
        }
        Some(range) if range.starts_with(' ') => {
            let (min, max) = adaptive_range(range.trim()).ok_or_else(|| {
                error(format!("`{name} = \"{text}\"`: write the least and the most calls in flight as two whole numbers joined by `..`, such as `{name} = \"adaptive 4..64\"`"))
            })?;
            rules::adaptive_bulkhead(min, max).map_err(|rule| error(rule.to_string()))?;
            BulkheadSize::Adaptive(min, max)
        }
        _ if per_key => BulkheadSize::Fixed(size.parse().map_err(|_| {
            error(format!("`{name} = \"{text}\"`: write the calls in flight at once per key as a whole number, such as `{name} = \"8 per key\"`, or `{name} = \"adaptive per key\"` for a limit that adapts"))
        })?),
        _ => return Err(error(format!("`{name}` takes a whole number, such as `{name} = 8`; `{name} = \"8 per key\"` for a bulkhead per key; or `{name} = \"adaptive\"` (`\"adaptive 4..64\"` with bounds) for a limit that adapts to the provider"))),
    };
    Ok(Bulkhead { size, per_key })
}

/// `4..64`: the least and the most.
fn adaptive_range(range: &str) -> Option<(usize, usize)> {
    let (min, max) = range.split_once("..")?;
    Some((min.trim().parse().ok()?, max.trim().parse().ok()?))
}

/// The burst when none is written: 1 for `rate`, so that no window of the period sees more
/// than the count (a gate lets `count + burst - 1` start in any window); the count for
/// `token_rate`, whose calls cost many units at once and must fit in the burst.
pub(crate) fn default_burst(name: &str, count: u64) -> u64 {
    match name {
        "token_rate" => count,
        _ => 1,
    }
}

/// `"60/min"`, `"10/s, burst 20"`, `"10/s, exact"` or both, in either order; the
/// [`default_burst`] unless given.
fn parse_rate(name: &str, text: &str, per_key: bool) -> Option<Rate> {
    let mut parts = text.split(',');
    let (count, unit) = parts.next()?.split_once('/')?;
    let count: u64 = count.trim().parse().ok()?;
    let period = match unit.trim() {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return None,
    };
    let (mut burst, mut exact, mut batch) = (None, false, None);
    for part in parts.map(str::trim) {
        match (part.strip_prefix("burst"), part.strip_prefix("batch")) {
            (Some(n), _) if burst.is_none() => burst = Some(n.trim().parse().ok()?),
            (_, Some(share)) if batch.is_none() => {
                batch = Some(share.trim().strip_suffix('%')?.trim_end().parse().ok()?);
            }
            (None, None) if part == "exact" && !exact => exact = true,
            _ => return None,
        }
    }
    Some(Rate {
        count,
        period,
        burst: burst.unwrap_or_else(|| default_burst(name, count)),
        exact,
        per_key,
        auto: false,
        learn: false,
        batch,
    })
}

/// `rate_cost = req.max_tokens`: any expression over the arguments.
pub(crate) fn expression(_name: &'static str, value: &Expr) -> syn::Result<Expr> {
    Ok(value.clone())
}

/// `route = model in ["claude-sonnet", "gpt-4o-mini"]`: the argument whose value each attempt
/// may change, and the other values, in order.
pub(crate) struct Route {
    pub(crate) argument: syn::Ident,
    pub(crate) targets: Expr,
}

impl syn::parse::Parse for Route {
    fn parse(input: syn::parse::ParseStream<'_>) -> syn::Result<Self> {
        let argument = input.parse()?;
        input.parse::<syn::Token![in]>()?;
        let targets = input.parse()?;
        Ok(Route { argument, targets })
    }
}

/// `route = model in [...]` (the tokens after `=`, kept as they were written).
pub(crate) fn route(_name: &'static str, value: &Expr) -> syn::Result<Route> {
    let malformed = || {
        syn::Error::new(
            value.span(),
            "`route` takes an argument and the other values it may take, in order: `route = model in [\"claude-sonnet\", \"gpt-4o-mini\"]`, or `route = model in self.fallbacks()`",
        )
    };
    match value {
        Expr::Verbatim(tokens) if !tokens.is_empty() => {
            syn::parse2(tokens.clone()).map_err(|_| malformed())
        }
        _ => Err(malformed()),
    }
}

/// `hedge = "1 after 800ms"`: at most `count` more attempts, each after `delay`.
#[derive(Clone, Copy)]
pub(crate) struct Hedge {
    pub(crate) count: u32,
    pub(crate) delay: Duration,
}

/// `hedge = "1 after 800ms"`.
pub(crate) fn hedge(name: &'static str, value: &Expr) -> syn::Result<Hedge> {
    let text = string_value(name, value, &["\"1 after 800ms\""])?;
    let malformed = || {
        syn::Error::new(
            value.span(),
            format!("`hedge` takes how many more attempts (1 to 3) and after how long each starts, such as `hedge = \"1 after 800ms\"`, not `{text}`"),
        )
    };
    let (count, delay) = text.split_once(" after ").ok_or_else(malformed)?;
    let count = count.trim().parse::<u32>().map_err(|_| malformed())?;
    let delay = duration::parse(delay.trim())
        .map_err(|message| syn::Error::new(value.span(), format!("`hedge`'s delay: {message}")))?;
    Ok(Hedge { count, delay })
}

/// `backoff = "300ms..8s"`.
pub(crate) fn range(name: &'static str, value: &Expr) -> syn::Result<(Duration, Duration)> {
    let text = string_value(name, value, &["\"300ms..8s\""])?;
    duration::parse_range(&text).map_err(|message| syn::Error::new(value.span(), message))
}

/// `jitter = "full"`.
pub(crate) fn jitter(name: &'static str, value: &Expr) -> syn::Result<Jitter> {
    let text = string_value(name, value, &["\"full\""])?;
    Jitter::from_name(&text).ok_or_else(|| {
        let names = Jitter::ALL.iter().map(|(known, _)| *known);
        let hint = did_you_mean(&text, names)
            .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
        syn::Error::new(value.span(), format!("unknown jitter \"{text}\"{hint}: use \"full\", \"equal\", \"decorrelated\" or \"none\""))
    })
}

/// `fallback = path::to::function`.
pub(crate) fn fallback(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`fallback` names an async fn taking the same arguments, such as `fallback = Self::cached_answer`")
}

/// `profile = "llm"`.
pub(crate) fn profile(name: &'static str, value: &Expr) -> syn::Result<&'static Profile> {
    let text = string_value(name, value, &["\"llm\""])?;
    profiles::named(&text).ok_or_else(|| {
        let names = profiles::ALL.iter().map(|profile| profile.name);
        let hint = did_you_mean(&text, names.clone())
            .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
        let names: Vec<_> = names.map(|name| format!("\"{name}\"")).collect();
        syn::Error::new(value.span(), format!("unknown profile \"{text}\"{hint}: use one of {}, and write beside it the keys that differ", names.join(", ")))
    })
}

/// `transient = classify`.
pub(crate) fn classifier(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`transient` names a function that says whether an error is worth retrying, `fn(&E) -> bool` or `fn(&E) -> resil::Classification`, such as `transient = is_retryable`")
}

/// `rejected = to_status`.
pub(crate) fn carrier(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`rejected` names a function that makes the function's error type from resil's own failures, `fn(resil::Rejected) -> E`, such as `rejected = to_status`")
}

/// `listener = AUDIT`.
pub(crate) fn listener(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`listener` names a `static` whose type implements `resil::events::Listener`, such as `listener = AUDIT` with `static AUDIT: Audit = Audit::new();`")
}

/// `commit_when = Chunk::has_content`.
pub(crate) fn committing_item(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`commit_when` names a function `fn(&T) -> bool` that recognises the first item worth committing to, such as `commit_when = Chunk::has_content`")
}

/// `complete_when = Chunk::is_final`.
pub(crate) fn final_item(_name: &'static str, value: &Expr) -> syn::Result<syn::Path> {
    path(value, "`complete_when` names a function `fn(&T) -> bool` that recognises the stream's final item, such as `complete_when = Chunk::is_final`")
}

fn path(value: &Expr, expected: &str) -> syn::Result<syn::Path> {
    match value {
        Expr::Path(path) if path.qself.is_none() => Ok(path.path.clone()),
        _ => Err(syn::Error::new(value.span(), expected)),
    }
}

/// `retry_budget = "20%"` or `"20%, min 10/s"`.
pub(crate) fn budget(name: &'static str, value: &Expr) -> syn::Result<Budget> {
    let text = string_value(name, value, &["\"20%\""])?;
    let budget = parse_budget(&text).ok_or_else(|| {
        syn::Error::new(value.span(), format!("`retry_budget = \"{text}\"` is not a budget: write the share of first attempts retries may add, such as \"20%\", optionally with a floor, such as \"20%, min 10/s\""))
    })?;
    rules::retry_budget(budget.percent, budget.min_per_sec)
        .map_err(|rule| syn::Error::new(value.span(), rule))?;
    Ok(budget)
}

/// `nested = "independent"` (true) or `"shared"`.
pub(crate) fn nesting(name: &'static str, value: &Expr) -> syn::Result<bool> {
    let text = string_value(name, value, &["\"independent\""])?;
    match text.as_str() {
        "independent" => Ok(true),
        "shared" => Ok(false),
        _ => Err(syn::Error::new(value.span(), format!("unknown nesting \"{text}\": use \"independent\" to keep this call's own retry count inside another operation, or \"shared\" (the default) to draw from the operation's allowance"))),
    }
}

/// `shared = true`.
pub(crate) fn flag(name: &'static str, value: &Expr) -> syn::Result<bool> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Bool(flag),
            ..
        }) => Ok(flag.value),
        _ => Err(syn::Error::new(
            value.span(),
            format!("`{name}` takes `true` or `false`, such as `{name} = true`"),
        )),
    }
}

/// `shared_fail = "open"` (false: the local state decides) or `"closed"` (true: refuse).
pub(crate) fn shared_fail(name: &'static str, value: &Expr) -> syn::Result<bool> {
    let text = string_value(name, value, &["\"closed\""])?;
    match text.as_str() {
        "closed" => Ok(true),
        "open" => Ok(false),
        _ => Err(syn::Error::new(value.span(), format!("unknown `shared_fail = \"{text}\"`: use \"open\" (the default: when Redis does not answer, the local state decides) or \"closed\" (refuse the call: for a limit that must never be exceeded)"))),
    }
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
    Some(Budget {
        percent,
        min_per_sec,
    })
}

/// The string `value` of the key `name`; anything else is refused with `examples` of what
/// to write, each a whole `name = example`.
fn string_value(name: &str, value: &Expr, examples: &[&str]) -> syn::Result<String> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Ok(text.value()),
        _ => {
            let examples: Vec<String> = (examples.iter())
                .map(|example| format!("`{name} = {example}`"))
                .collect();
            Err(syn::Error::new(
                value.span(),
                format!("`{name}` takes a string, such as {}", examples.join(" or ")),
            ))
        }
    }
}

pub(crate) fn duration_value(name: &'static str, value: &Expr) -> syn::Result<Duration> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Int(_), ..
    }) = value
    {
        return Err(syn::Error::new(value.span(), format!("`{name}` needs a unit: write it as a string such as `{name} = \"20s\"` or `\"300ms\"`")));
    }
    let text = string_value(name, value, &["\"20s\""])?;
    let duration =
        duration::parse(&text).map_err(|message| syn::Error::new(value.span(), message))?;
    rules::positive(name, duration).map_err(|rule| syn::Error::new(value.span(), rule))?;
    Ok(duration)
}

pub(crate) fn count_value(name: &'static str, value: &Expr) -> syn::Result<u32> {
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
