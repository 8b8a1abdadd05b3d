//! Rules across keys and against the function's signature, turning [`ResilientArgs`] into a
//! [`Config`] the expansion can trust.

use std::time::Duration;

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{FnArg, Pat, ReturnType, Signature, Type};

use resil_spec::{defaults, rules, BreakerKind, Jitter};

use crate::errors::Errors;
use crate::keys::did_you_mean;
use crate::keys::{ResilientArgs, Setting};
use crate::values::{BreakerArg, Budget, Bulkhead, KindName, Rate};

/// A checked `#[resilient]` configuration.
pub(crate) struct Config {
    /// The profile the values started from, for the docs.
    pub(crate) profile: Option<&'static str>,
    /// The limit of one attempt: for a stream, its `first_item_timeout`.
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) retry: u32,
    pub(crate) retry_after_max: Option<Duration>,
    pub(crate) backoff: Option<(Duration, Duration)>,
    pub(crate) jitter: Option<Jitter>,
    /// What the per-key state is per, for a keyed function.
    pub(crate) key: Option<Keying>,
    pub(crate) breaker: Option<Breaker>,
    pub(crate) max_keys: Option<u32>,
    pub(crate) bulkhead: Option<Bulkhead>,
    pub(crate) bulkhead_queue: Option<u32>,
    pub(crate) rate: Option<Rate>,
    /// The token gate and the expression an attempt's cost is.
    pub(crate) token_rate: Option<(Rate, syn::Expr)>,
    pub(crate) fallback: Option<syn::Path>,
    /// A static that hears this function's events.
    pub(crate) listener: Option<syn::Path>,
    pub(crate) retry_budget: Option<Budget>,
    pub(crate) independent: bool,
    /// Set when the state is kept in Redis (`shared = true`).
    pub(crate) shared: Option<Shared>,
    /// Set when the function returns a stream.
    pub(crate) stream: Option<StreamShape>,
}

/// `Result<impl Stream<Item = Result<T, E>>, E>`: the parts the expansion names.
pub(crate) struct StreamShape {
    /// `T`
    pub(crate) item: Type,
    /// `E`
    pub(crate) error: Type,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) complete_when: Option<syn::Path>,
    pub(crate) commit_when: Option<syn::Path>,
}

/// `shared = true`: where it was written, and its tuning.
pub(crate) struct Shared {
    pub(crate) span: Span,
    pub(crate) timeout: Option<Duration>,
    pub(crate) fail_closed: bool,
}

/// The breaker settings.
pub(crate) struct Breaker {
    /// The process-wide breaker's name; `None` for a breaker per key.
    pub(crate) named: Option<String>,
    pub(crate) threshold: u32,
    pub(crate) cooldown: Duration,
    pub(crate) kind: BreakerKind,
}

/// A keyed function's key: `key = <expr>`, or the argument of `breaker = "per_<argument>"`.
pub(crate) struct Keying {
    /// How names and labels show what the keys are: `model`, `req.model`, `(provider, model)`.
    pub(crate) label: String,
    pub(crate) value: KeyValue,
}

/// The key's value, in the parts the expansion borrows.
pub(crate) enum KeyValue {
    One(KeyPart),
    /// `(provider, model)`: two to four parts, keyed together.
    Tuple(Vec<KeyPart>),
}

pub(crate) enum KeyPart {
    Argument(KeyArgument),
    Expr(syn::Expr),
}

/// An argument that is (part of) the key.
pub(crate) struct KeyArgument {
    pub(crate) ident: syn::Ident,
    /// Declared as a reference (`model: &str`), so passed to the lookup as it is.
    pub(crate) by_ref: bool,
}

impl Config {
    /// Does an attempt need its own copy of the by-value arguments? Yes when there may be
    /// another attempt, or a fallback that gets the originals.
    pub(crate) fn clones_arguments(&self) -> bool {
        self.retry > 0 || self.fallback.is_some()
    }
}

/// Checks the attribute against itself and the signature; reports every mistake at once.
pub(crate) fn check(
    mut args: ResilientArgs,
    sig: &Signature,
    mut errors: Errors,
) -> Result<Config, syn::Error> {
    check_signature(sig, &mut errors);
    let (streaming, stream) = stream_shape(sig, &mut errors);
    check_stream_keys(&args, streaming, &mut errors);
    apply_profile(&mut args, streaming);
    let timeout = args.timeout.as_ref().or(args.first_item_timeout.as_ref());

    if let (Some(timeout), Some(deadline)) = (timeout, &args.deadline) {
        errors.check(
            timeout.span,
            rules::timeout_within_deadline(timeout.value, deadline.value),
        );
    }
    if let (Some(retry), Some(deadline)) = (&args.retry, &args.deadline) {
        let backoff = args
            .backoff
            .as_ref()
            .map_or((defaults::BACKOFF_BASE, defaults::BACKOFF_CAP), |s| s.value);
        let jitter = args.jitter.as_ref().map_or(Jitter::default(), |s| s.value);
        errors.check(
            retry.span,
            rules::retries_within_deadline(retry.value, backoff, jitter, deadline.value),
        );
    }
    if let Some(bulkhead) = &args.bulkhead {
        errors.check(
            bulkhead.span,
            rules::bulkhead(bulkhead.value.limit as usize),
        );
    }
    let kind = check_breaker_tuning(&args, &mut errors);
    let key = check_key(&args, sig, &mut errors);
    if args.retry.as_ref().is_none_or(|retry| retry.value == 0) {
        for (name, key) in [
            ("retry_budget", args.retry_budget.as_ref().map(|s| s.key)),
            (
                "retry_after_max",
                args.retry_after_max.as_ref().map(|s| s.key),
            ),
            ("nested", args.nested.as_ref().map(|s| s.key)),
        ] {
            if let Some(key) = key {
                errors.push(
                    key,
                    format!("`{name}` governs retries, but this function makes none: add `retry = 2` (or more), or remove `{name}`"),
                );
            }
        }
    }
    check_gate_keys(&args, &mut errors);
    let shared = check_shared(&args, &mut errors);
    if args.fallback.is_some() {
        for input in &sig.inputs {
            if let FnArg::Typed(arg) = input {
                if !matches!(&*arg.pat, Pat::Ident(_)) {
                    errors.push(
                        arg.pat.span(),
                        "the fallback is called with the same arguments, so each needs a name: bind this argument to a name and destructure it in the body",
                    );
                }
            }
        }
    }
    errors.into_result()?;

    let timeout = timeout.map(|s| s.value);
    Ok(Config {
        profile: args.profile.map(|s| s.value.name),
        timeout,
        deadline: args.deadline.map(|s| s.value),
        retry: args.retry.map_or(0, |s| s.value),
        retry_after_max: args.retry_after_max.map(|s| s.value),
        backoff: args.backoff.map(|s| s.value),
        jitter: args.jitter.map(|s| s.value),
        key,
        breaker: args.breaker.map(|breaker| Breaker {
            named: match breaker.value {
                BreakerArg::Named(name) => Some(name),
                BreakerArg::PerArg(_) => None,
            },
            threshold: args
                .breaker_threshold
                .map_or(defaults::BREAKER_THRESHOLD, |s| s.value),
            cooldown: args
                .breaker_cooldown
                .map_or(defaults::BREAKER_COOLDOWN, |s| s.value),
            kind,
        }),
        max_keys: args.max_keys.map(|s| s.value),
        bulkhead: args.bulkhead.map(|s| s.value),
        bulkhead_queue: args.bulkhead_queue.map(|s| s.value),
        rate: args.rate.map(|s| s.value),
        token_rate: args
            .token_rate
            .zip(args.rate_cost)
            .map(|(rate, cost)| (rate.value, cost.value)),
        fallback: args.fallback.map(|s| s.value),
        listener: args.listener.map(|s| s.value),
        retry_budget: args.retry_budget.map(|s| s.value),
        independent: args.nested.is_some_and(|s| s.value),
        shared,
        stream: stream.map(|(item, error)| StreamShape {
            item,
            error,
            idle_timeout: args.idle_timeout.map(|s| s.value),
            complete_when: args.complete_when.map(|s| s.value),
            commit_when: args.commit_when.map(|s| s.value),
        }),
    })
}

/// `shared = true` needs something to share; its tuning needs `shared = true`.
fn check_shared(args: &ResilientArgs, errors: &mut Errors) -> Option<Shared> {
    let shared = args.shared.as_ref().filter(|s| s.value);
    let Some(shared) = shared else {
        for (name, key) in [
            (
                "shared_timeout",
                args.shared_timeout.as_ref().map(|s| s.key),
            ),
            ("shared_fail", args.shared_fail.as_ref().map(|s| s.key)),
        ] {
            if let Some(key) = key {
                errors.push(key, format!("`{name}` tunes how a shared policy uses Redis, but this one is not shared: add `shared = true`, or remove `{name}`"));
            }
        }
        return None;
    };
    let shares = args.breaker.is_some() || args.rate.is_some() || args.token_rate.is_some();
    errors.check(shared.key, rules::shares(shares));
    if let Some(timeout) = &args.shared_timeout {
        errors.check(timeout.span, rules::shared_timeout(timeout.value));
    }
    Some(Shared {
        span: shared.key,
        timeout: args.shared_timeout.as_ref().map(|s| s.value),
        fail_closed: args.shared_fail.as_ref().is_some_and(|s| s.value),
    })
}

/// Fills what the attribute left unsaid from its profile, if any: a key written beside the
/// profile wins. The profile's values are checked with the rest, at the profile's token. Its
/// timeout bounds a stream's first item; its retry tuning and breaker tuning apply only
/// where there are retries and a breaker.
fn apply_profile(args: &mut ResilientArgs, streaming: bool) {
    let Some(profile) = &args.profile else {
        return;
    };
    let (preset, key, span) = (profile.value, profile.key, profile.span);
    fn fill<T>(field: &mut Option<Setting<T>>, value: Option<T>, key: Span, span: Span) {
        if field.is_none() {
            *field = value.map(|value| Setting { value, key, span });
        }
    }
    if streaming {
        fill(&mut args.first_item_timeout, preset.timeout, key, span);
    } else {
        fill(&mut args.timeout, preset.timeout, key, span);
    }
    fill(&mut args.retry, preset.retry, key, span);
    if args.retry.as_ref().is_some_and(|retry| retry.value > 0) {
        fill(&mut args.backoff, preset.backoff, key, span);
        fill(&mut args.jitter, preset.jitter, key, span);
        fill(&mut args.retry_after_max, preset.retry_after_max, key, span);
    }
    if args.breaker.is_some() {
        let consecutive = args
            .breaker_kind
            .as_ref()
            .is_none_or(|kind| kind.value == KindName::Consecutive);
        if consecutive {
            fill(
                &mut args.breaker_threshold,
                preset.breaker_threshold,
                key,
                span,
            );
        }
        fill(
            &mut args.breaker_cooldown,
            preset.breaker_cooldown,
            key,
            span,
        );
    }
}

/// The keys that tune the breaker: they need one, and each kind its own. Returns how the
/// breaker judges.
fn check_breaker_tuning(args: &ResilientArgs, errors: &mut Errors) -> BreakerKind {
    let tuning = [
        (
            "breaker_threshold",
            args.breaker_threshold.as_ref().map(|s| s.key),
        ),
        (
            "breaker_cooldown",
            args.breaker_cooldown.as_ref().map(|s| s.key),
        ),
        ("breaker_kind", args.breaker_kind.as_ref().map(|s| s.key)),
        ("breaker_rate", args.breaker_rate.as_ref().map(|s| s.key)),
        (
            "breaker_window",
            args.breaker_window.as_ref().map(|s| s.key),
        ),
        (
            "breaker_min_calls",
            args.breaker_min_calls.as_ref().map(|s| s.key),
        ),
        ("breaker_slow", args.breaker_slow.as_ref().map(|s| s.key)),
    ];
    if args.breaker.is_none() {
        for (name, key) in tuning {
            if let Some(key) = key {
                errors.push(
                    key,
                    format!("`{name}` tunes a circuit breaker, but there is none: add `breaker = \"name\"` (or `\"per_<argument>\"`), or remove `{name}`"),
                );
            }
        }
        return BreakerKind::Consecutive;
    }
    if let Some(threshold) = &args.breaker_threshold {
        errors.check(threshold.span, rules::breaker_threshold(threshold.value));
    }
    let kind = args
        .breaker_kind
        .as_ref()
        .map_or(KindName::Consecutive, |s| s.value);
    let (percent, window, min_calls) = (
        args.breaker_rate
            .as_ref()
            .map_or(defaults::BREAKER_RATE, |s| s.value),
        args.breaker_window
            .as_ref()
            .map_or(defaults::BREAKER_WINDOW, |s| s.value),
        args.breaker_min_calls
            .as_ref()
            .map_or(defaults::BREAKER_MIN_CALLS, |s| s.value),
    );
    let judged = |errors: &mut Errors| {
        let span = [
            &args.breaker_rate,
            &args.breaker_window,
            &args.breaker_min_calls,
        ]
        .into_iter()
        .flatten()
        .map(|s| s.span)
        .next()
        .or(args.breaker_kind.as_ref().map(|s| s.span));
        if let Some(span) = span {
            errors.check(span, rules::breaker_window(percent, window, min_calls));
        }
        (percent.min(100) as u8, window, min_calls)
    };
    match kind {
        KindName::Consecutive => {
            for (name, key) in &tuning[3..] {
                if let Some(key) = key {
                    errors.push(*key, format!("`{name}` tunes a failure_rate or slow_call breaker, and this one counts consecutive failures: add `breaker_kind = \"failure_rate\"`, or remove `{name}`"));
                }
            }
            BreakerKind::Consecutive
        }
        kind => {
            if let Some(threshold) = &args.breaker_threshold {
                errors.push(threshold.key, format!("`breaker_threshold` counts consecutive failures, and a {} breaker opens at a share of calls: set `breaker_rate = \"25%\"` instead, or remove `breaker_threshold`", kind.name()));
            }
            let (percent, window, min_calls) = judged(errors);
            match (kind, &args.breaker_slow) {
                (KindName::SlowCall, Some(slow)) => BreakerKind::SlowCall {
                    percent,
                    slower_than: slow.value,
                    window,
                    min_calls,
                },
                (KindName::SlowCall, None) => {
                    if let Some(kind) = &args.breaker_kind {
                        errors.push(kind.span, "a slow_call breaker needs what counts as slow: add `breaker_slow = \"2s\"`");
                    }
                    BreakerKind::Consecutive
                }
                (_, slow) => {
                    if let Some(slow) = slow {
                        errors.push(slow.key, "`breaker_slow` says what a slow_call breaker counts as slow, and this one counts failures: use `breaker_kind = \"slow_call\"`, or remove `breaker_slow`");
                    }
                    BreakerKind::FailureRate {
                        percent,
                        window,
                        min_calls,
                    }
                }
            }
        }
    }
}

/// The function's key, from `key = <expr>` or `breaker = "per_<argument>"`, and the rules
/// of what is per key: one key per function, and a key only where something is per key.
fn check_key(args: &ResilientArgs, sig: &Signature, errors: &mut Errors) -> Option<Keying> {
    let per_arg = args
        .breaker
        .as_ref()
        .and_then(|breaker| match &breaker.value {
            BreakerArg::PerArg(name) => Some((name, breaker.span)),
            BreakerArg::Named(_) => None,
        });
    let keying = match (&args.key, per_arg) {
        (Some(key), Some((name, span))) => {
            if name != "key" {
                errors.push(span, format!("`breaker = \"per_{name}\"` keys the breaker by `{name}`, but this function has `key = …`: one key per function; write `breaker = \"per_key\"` for a breaker per value of `key`"));
            }
            key_expression(&key.value, sig, errors)
        }
        (Some(key), None) => key_expression(&key.value, sig, errors),
        (None, Some((name, span))) => match key_argument(sig, name) {
            Some(argument) => Some(Keying {
                label: name.clone(),
                value: KeyValue::One(KeyPart::Argument(argument)),
            }),
            None => {
                let message = if name == "key" {
                    "`breaker = \"per_key\"` gives each key its own breaker, but the function has no key: add `key = <an expression over the arguments>`, such as `key = req.model`".to_owned()
                } else {
                    let names = argument_names(sig);
                    let hint = match did_you_mean(name, names.iter().map(String::as_str)) {
                        Some(arg) => format!("did you mean `per_{arg}`?"),
                        None if names.is_empty() => "the function takes no named argument".to_owned(),
                        None => format!(
                            "its arguments are {}; for a field or another expression, write `key = …` and `breaker = \"per_key\"`",
                            names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        ),
                    };
                    format!("`breaker = \"per_{name}\"` keys the breaker by the argument `{name}`, but the function has no such argument: {hint}")
                };
                errors.push(span, message);
                None
            }
        },
        (None, None) => None,
    };
    let keyed = args.key.is_some() || per_arg.is_some();
    let per_key = [
        (
            "bulkhead",
            args.bulkhead
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
        (
            "rate",
            args.rate
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
        (
            "token_rate",
            args.token_rate
                .as_ref()
                .filter(|s| s.value.per_key)
                .map(|s| s.span),
        ),
    ];
    if !keyed {
        for (name, span) in per_key {
            if let Some(span) = span {
                errors.push(span, format!("`{name}` is per key, but the function has no key: add `key = <an expression over the arguments>`, such as `key = req.model`"));
            }
        }
        if let Some(max_keys) = &args.max_keys {
            errors.push(max_keys.key, "`max_keys` bounds what is kept per key, but nothing is: add `key = …` with `breaker = \"per_key\"` (or `bulkhead = \"8 per key\"`, `rate = \"60/min per key\"`), or remove `max_keys`");
        }
    }
    if let Some(max_keys) = args.max_keys.as_ref().filter(|_| keyed) {
        errors.check(max_keys.span, rules::max_keys(max_keys.value as usize));
    }
    if let Some(key) = args.key.as_ref().filter(|_| errors.is_empty()) {
        if per_arg.is_none() && per_key.iter().all(|(_, span)| span.is_none()) {
            errors.push(key.key, "`key` scopes nothing: add `breaker = \"per_key\"`, or write ` per key` after a bulkhead or rate, such as `bulkhead = \"8 per key\"` or `rate = \"60/min per key\"`");
        }
    }
    keying
}

/// `key = model`, `key = req.model`, `key = (provider, model)`.
fn key_expression(expr: &syn::Expr, sig: &Signature, errors: &mut Errors) -> Option<Keying> {
    let part = |expr: &syn::Expr| match expr {
        syn::Expr::Path(path) if path.qself.is_none() => path
            .path
            .get_ident()
            .and_then(|ident| key_argument(sig, &ident.to_string()))
            .map_or_else(|| KeyPart::Expr(expr.clone()), KeyPart::Argument),
        _ => KeyPart::Expr(expr.clone()),
    };
    let value = match expr {
        syn::Expr::Lit(_) => {
            errors.push(expr.span(), "`key` is an expression over the arguments, such as `key = req.model` or `key = (provider, model)`: a literal would be the same key for every call");
            return None;
        }
        syn::Expr::Tuple(tuple) if !(2..=4).contains(&tuple.elems.len()) => {
            errors.push(
                expr.span(),
                "a key tuple has 2 to 4 parts, such as `key = (provider, model)`",
            );
            return None;
        }
        syn::Expr::Tuple(tuple) => KeyValue::Tuple(tuple.elems.iter().map(part).collect()),
        expr => KeyValue::One(part(expr)),
    };
    Some(Keying {
        label: label(expr),
        value,
    })
}

/// The expression as written, without the spaces token streams put around punctuation.
fn label(expr: &syn::Expr) -> String {
    let text = expr.to_token_stream().to_string();
    [
        (" . ", "."),
        ("( ", "("),
        (" )", ")"),
        (" ,", ","),
        (" (", "("),
    ]
    .iter()
    .fold(text, |text, (from, to)| text.replace(from, to))
}

/// The queue needs a bulkhead; the token gate and its cost need each other.
fn check_gate_keys(args: &ResilientArgs, errors: &mut Errors) {
    if let Some(queue) = &args.bulkhead_queue {
        if args.bulkhead.is_none() {
            errors.push(
                queue.key,
                "`bulkhead_queue` lets callers wait for a place in the bulkhead, but there is none: add `bulkhead = 8` (the calls in flight at once), or remove `bulkhead_queue`",
            );
        } else if queue.value == 0 {
            errors.push(
                queue.span,
                "`bulkhead_queue = 0` lets nobody wait, as if it were not there: give the number of callers that may wait for a place, such as 16, or remove it",
            );
        }
    }
    match (&args.token_rate, &args.rate_cost) {
        (Some(rate), None) => errors.push(
            rate.key,
            "`token_rate` weighs each attempt by its cost, which is missing: add `rate_cost = <an expression over the arguments>`, such as `rate_cost = req.max_tokens`",
        ),
        (None, Some(cost)) => errors.push(
            cost.key,
            "`rate_cost` says what an attempt costs the token gate, but there is none: add `token_rate = \"90000/min\"`, or remove `rate_cost`",
        ),
        _ => {}
    }
}

/// The keys that belong to streams, and `timeout`, which does not.
fn check_stream_keys(args: &ResilientArgs, streaming: bool, errors: &mut Errors) {
    if streaming {
        if let Some(timeout) = &args.timeout {
            errors.push(
                timeout.key,
                "`timeout` would cut a stream that is still answering: this function streams, so bound it with `first_item_timeout` (to the first item, connect included), `idle_timeout` (between items) and `deadline` (to the last item)",
            );
        }
        return;
    }
    for (name, key) in [
        (
            "first_item_timeout",
            args.first_item_timeout.as_ref().map(|s| s.key),
        ),
        ("idle_timeout", args.idle_timeout.as_ref().map(|s| s.key)),
        ("complete_when", args.complete_when.as_ref().map(|s| s.key)),
        ("commit_when", args.commit_when.as_ref().map(|s| s.key)),
    ] {
        if let Some(key) = key {
            let instead = if name.ends_with("_when") {
                format!("remove `{name}`")
            } else {
                "use `timeout` for one call".to_owned()
            };
            errors.push(
                key,
                format!("`{name}` applies to a function that returns a stream, `Result<impl Stream<Item = Result<T, E>>, E>`; this one answers once: {instead}"),
            );
        }
    }
}

/// Whether the function returns `Result<impl Stream<Item = …>, E>`, and `(T, E)` when the
/// items are `Result<T, E>`. Other items are reported: failures after the first item reach
/// the consumer as items, so they need the function's error type.
fn stream_shape(sig: &Signature, errors: &mut Errors) -> (bool, Option<(Type, Type)>) {
    match stream_item(sig) {
        Some((item, error)) => (true, stream_types(item, error, errors)),
        // `fn … -> impl Stream`: reported by `check_signature`; its stream keys are not.
        None => (returns_bare_stream(sig), None),
    }
}

/// The `Item` type and `E` of `Result<impl Stream<Item = …>, E>`.
fn stream_item(sig: &Signature) -> Option<(&Type, &Type)> {
    let ReturnType::Type(_, output) = &sig.output else {
        return None;
    };
    let [ok, error] = generic_types(output, "Result")?;
    Some((stream_bound(ok)?, error))
}

/// The `Item` of `impl Stream<Item = …>`.
fn stream_bound(ty: &Type) -> Option<&Type> {
    let Type::ImplTrait(bounds) = ty else {
        return None;
    };
    bounds.bounds.iter().find_map(|bound| match bound {
        syn::TypeParamBound::Trait(bound) => {
            let last = bound.path.segments.last()?;
            if last.ident != "Stream" {
                return None;
            }
            let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            args.args.iter().find_map(|arg| match arg {
                syn::GenericArgument::AssocType(assoc) if assoc.ident == "Item" => Some(&assoc.ty),
                _ => None,
            })
        }
        _ => None,
    })
}

fn stream_types(item: &Type, error: &Type, errors: &mut Errors) -> Option<(Type, Type)> {
    let same_error =
        |ty: &Type| ty.to_token_stream().to_string() == error.to_token_stream().to_string();
    match generic_types(item, "Result") {
        Some([value, item_error]) if same_error(item_error) => Some((value.clone(), error.clone())),
        _ => {
            errors.push(
                item.span(),
                format!(
                    "the stream's items must be `Result<T, {}>`, with the function's error type: errors after the first item reach the consumer as items",
                    error.to_token_stream()
                ),
            );
            None
        }
    }
}

/// The two type arguments of `Name<A, B>`.
fn generic_types<'t>(ty: &'t Type, name: &str) -> Option<[&'t Type; 2]> {
    let Type::Path(path) = ty else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let mut types = args.args.iter().filter_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    });
    Some([types.next()?, types.next()?])
}

fn returns_bare_stream(sig: &Signature) -> bool {
    matches!(&sig.output, ReturnType::Type(_, output) if stream_bound(output).is_some())
}

fn check_signature(sig: &Signature, errors: &mut Errors) {
    if let ReturnType::Type(_, output) = &sig.output {
        if stream_bound(output).is_some() {
            errors.push(
                output.span(),
                "#[resilient] guards a stream through the call that opens it: write `async fn … -> Result<impl Stream<Item = Result<T, E>>, E>`, connect in the body and return `Ok(stream)`; the attribute retries until the first item and then hands the stream over",
            );
            return;
        }
    }
    if sig.asyncness.is_none() {
        errors.push(
            sig.fn_token.span,
            "#[resilient] goes on an `async fn`: each attempt re-runs the body and may be cut by a timeout, which needs a future; write `async fn`",
        );
    }
    match &sig.output {
        ReturnType::Default => errors.push(
            sig.paren_token.span.close(),
            "#[resilient] needs the function to return `Result<T, E>`: the error says whether a failure is worth retrying; add `-> Result<T, E>`",
        ),
        ReturnType::Type(_, ty) if result_type(ty).is_none() => errors.push(
            ty.span(),
            "#[resilient] needs the function to return `Result<T, E>` (or an alias whose name ends in `Result`): the error says whether a failure is worth retrying",
        ),
        ReturnType::Type(..) => {}
    }
}

/// The return type, if it is a `Result` or an alias named `...Result`.
pub(crate) fn result_type(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Path(path) if path.qself.is_none() => {
            let last = path.path.segments.last()?;
            last.ident.to_string().ends_with("Result").then_some(ty)
        }
        Type::Paren(inner) => result_type(&inner.elem),
        Type::Group(inner) => result_type(&inner.elem),
        _ => None,
    }
}

/// Whether `ty` is a reference, seen through parentheses and the invisible groups a
/// `macro_rules!` `$t:ty` leaves around it.
pub(crate) fn is_reference(ty: &Type) -> bool {
    match ty {
        Type::Reference(_) => true,
        Type::Paren(inner) => is_reference(&inner.elem),
        Type::Group(inner) => is_reference(&inner.elem),
        _ => false,
    }
}

/// The argument bound to `name`, if the function has one.
fn key_argument(sig: &Signature, name: &str) -> Option<KeyArgument> {
    sig.inputs.iter().find_map(|input| match input {
        FnArg::Typed(arg) => match &*arg.pat {
            Pat::Ident(ident) if ident.ident == name => Some(KeyArgument {
                ident: ident.ident.clone(),
                by_ref: is_reference(&arg.ty),
            }),
            _ => None,
        },
        FnArg::Receiver(_) => None,
    })
}

/// The names bound directly by the function's arguments.
pub(crate) fn argument_names(sig: &Signature) -> Vec<String> {
    sig.inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(arg) => match &*arg.pat {
                Pat::Ident(ident) => Some(ident.ident.to_string()),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}
