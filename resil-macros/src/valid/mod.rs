//! Rules across keys and against the function's signature, turning [`ResilientArgs`] into a
//! [`Config`] the expansion can trust.

use std::time::Duration;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{FnArg, Pat, Signature, Type};

use resil_spec::{defaults, rules, BreakerKind, Jitter, WindowSize};

mod classifier;
mod hedge;
mod keys;
mod priority;
mod route;
mod signature;

use classifier::check_classifier;
use hedge::check_hedge;
use keys::{check_gate_keys, check_key, check_stream_keys};
use priority::check_priority;
use route::check_route;
pub(crate) use signature::is_reference;
use signature::{check_signature, stream_shape};

use crate::errors::Errors;
use crate::keys::{ResilientArgs, Setting};
use crate::values::{BreakerArg, Budget, Bulkhead, BulkheadSize, KindName, Rate};

/// A checked `#[resilient]` configuration.
pub(crate) struct Config {
    /// The profile the values started from, for the docs.
    pub(crate) profile: Option<&'static str>,
    /// The limit of one attempt: for a stream, its `first_item_timeout`.
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) retry: u32,
    /// `transient = path`: decides for the error type instead of its `Transient`.
    pub(crate) transient: Option<syn::Path>,
    /// `rejected = path`: makes the error type from a `Rejected`, instead of its `From`.
    pub(crate) rejected: Option<syn::Path>,
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
    /// Set when each attempt may go to another value of an argument.
    pub(crate) route: Option<Route>,
    /// Set when slow attempts are raced by more.
    pub(crate) hedge: Option<crate::values::Hedge>,
    /// `priority = ARG`: the argument whose class orders the callers that wait.
    pub(crate) priority: Option<KeyArgument>,
    /// `fair = ARG`: the argument whose values share the wait in turn.
    pub(crate) fair: Option<KeyArgument>,
}

/// `route = model in [...]`: the argument, and the expression of its other values.
pub(crate) struct Route {
    pub(crate) argument: KeyArgument,
    pub(crate) targets: syn::Expr,
    pub(crate) span: Span,
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
    pub(crate) commit_hold: Option<u32>,
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
    /// another attempt (a route's loop may make one), or a fallback that gets the originals.
    pub(crate) fn clones_arguments(&self) -> bool {
        self.retry > 0 || self.fallback.is_some() || self.route.is_some() || self.hedge.is_some()
    }
}

/// Checks the attribute against itself and the signature; reports every mistake at once.
/// The gate `rate` learns from the provider's answers too when `learn = true`.
fn learning(rate: Rate, learn: bool) -> Rate {
    Rate {
        learn: rate.learn || learn,
        ..rate
    }
}

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
        // An adaptive one's bounds are checked as they are read.
        if let BulkheadSize::Fixed(limit) = bulkhead.value.size {
            errors.check(bulkhead.span, rules::bulkhead(limit as usize));
        }
    }
    let kind = check_breaker_tuning(&args, &mut errors);
    let key = check_key(&args, sig, &mut errors);
    let route = check_route(&args, sig, key.as_ref(), &mut errors);
    let hedge = check_hedge(&args, sig, timeout.map(|s| s.value), &mut errors);
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
    check_classifier(&args, streaming, &mut errors);
    check_gate_keys(&args, &mut errors);
    let (priority, fair) = check_priority(&args, sig, &mut errors);
    let learn = args.learn.as_ref().is_some_and(|s| s.value);
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
        transient: args.transient.map(|s| s.value),
        rejected: args.rejected.map(|s| s.value),
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
        rate: args.rate.map(|s| learning(s.value, learn)),
        token_rate: args
            .token_rate
            .zip(args.rate_cost)
            .map(|(rate, cost)| (learning(rate.value, learn), cost.value)),
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
            commit_hold: args.commit_hold.map(|s| s.value),
        }),
        route,
        hedge,
        priority,
        fair,
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
            .map_or(WindowSize::Calls(defaults::BREAKER_WINDOW), |s| s.value),
        args.breaker_min_calls
            .as_ref()
            .map_or(defaults::BREAKER_MIN_CALLS, |s| s.value),
    );
    let judged = |errors: &mut Errors| {
        let span = [
            args.breaker_rate.as_ref().map(|s| s.span),
            args.breaker_window.as_ref().map(|s| s.span),
            args.breaker_min_calls.as_ref().map(|s| s.span),
        ]
        .into_iter()
        .flatten()
        .next()
        .or(args.breaker_kind.as_ref().map(|s| s.span));
        if let Some(span) = span {
            errors.check(span, rules::breaker_window(percent, window, min_calls));
        }
        if args.shared.as_ref().is_some_and(|s| s.value) {
            let at = (args.breaker_window.as_ref().map(|s| s.span))
                .or(args.breaker_kind.as_ref().map(|s| s.span));
            if let Some(at) = at {
                errors.check(at, rules::shared_window(window));
            }
        }
        // A named breaker behind gates per key sees more than one gate's calls: no bound holds.
        let shared = matches!(
            args.breaker.as_ref().map(|s| &s.value),
            Some(BreakerArg::Named(_))
        );
        let gate = args
            .rate
            .as_ref()
            .filter(|s| !(s.value.auto || s.value.per_key && shared));
        if let (Some(rate), Some(span)) = (gate, span) {
            let Rate {
                count,
                period,
                burst,
                ..
            } = rate.value;
            let rate = rules::min_calls_within_rate(min_calls, window, (count, period, burst));
            errors.check(
                args.breaker_min_calls.as_ref().map_or(span, |s| s.span),
                rate,
            );
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
