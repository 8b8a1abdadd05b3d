//! The "Resilience" section `#[resilient]` appends to the function's docs: the policy in
//! words, and its worst case.

use quote::ToTokens;
use resil_spec::duration::human;
use resil_spec::{defaults, Jitter};

use crate::valid::Config;
use crate::values::{default_burst, BulkheadSize, Rate};
use resil_spec::BreakerKind;

/// The "Resilience" section appended to the function's docs.
pub(super) fn docs(config: &Config) -> Vec<syn::Attribute> {
    let mut parts = Vec::new();
    if let Some(profile) = config.profile {
        parts.push(format!("profile `{profile}`"));
    }
    if let Some(timeout) = config.timeout {
        let key = match config.stream {
            Some(_) => "first item within",
            None => "timeout",
        };
        parts.push(format!("{key} {}", human(timeout)));
    }
    if let Some(idle) = config.stream.as_ref().and_then(|s| s.idle_timeout) {
        parts.push(format!("idle timeout {}", human(idle)));
    }
    if let Some(deadline) = config.deadline {
        parts.push(format!("deadline {}", human(deadline)));
    }
    if let Some(stream) = &config.stream {
        let tests = [
            ("committed when", &stream.commit_when),
            ("complete when", &stream.complete_when),
        ];
        for (what, path) in tests {
            if let Some(path) = path {
                let path = path.to_token_stream().to_string().replace(' ', "");
                parts.push(format!("{what} `{path}`"));
            }
        }
        if let Some(hold) = stream.commit_hold {
            parts.push(format!("at most {hold} items held before the commit"));
        }
    }
    let (base, cap) = config
        .backoff
        .unwrap_or((defaults::BACKOFF_BASE, defaults::BACKOFF_CAP));
    let jitter = config.jitter.unwrap_or_default();
    let retry_after_max = config.retry_after_max.unwrap_or(defaults::RETRY_AFTER_MAX);
    if config.retry > 0 {
        parts.push(format!("retry {}", config.retry));
        parts.push(format!("backoff {}..{}", human(base), human(cap)));
        if config.retry_after_max.is_some() {
            parts.push(format!("Retry-After up to {}", human(retry_after_max)));
        }
        if jitter != Jitter::Full {
            parts.push(format!("{} jitter", jitter.name()));
        }
        if let Some(budget) = config.retry_budget {
            parts.push(match budget.min_per_sec {
                0.0 => format!("retry budget {}%", budget.percent),
                min => format!("retry budget {}% (min {min}/s)", budget.percent),
            });
        }
        if config.independent {
            parts.push("retries counted independently when nested".to_owned());
        }
    }
    let key = config.key.as_ref().map(|key| key.label.as_str());
    let per_key = |per_key: bool| match key {
        Some(key) if per_key => format!(" per `{key}`"),
        _ => String::new(),
    };
    if let Some(breaker) = &config.breaker {
        let which = match &breaker.named {
            Some(name) => format!("breaker `{name}`"),
            None => format!("a breaker{}", per_key(true)),
        };
        let opens = match breaker.kind {
            BreakerKind::Consecutive => format!("opens after {} failures", breaker.threshold),
            BreakerKind::FailureRate {
                percent,
                window,
                min_calls,
            } => format!("opens when {percent}% of {window} failed, from {min_calls} calls"),
            BreakerKind::SlowCall {
                percent,
                slower_than,
                window,
                min_calls,
            } => format!(
                "opens when {percent}% of {window} took {} or more, from {min_calls} calls",
                human(slower_than)
            ),
        };
        parts.push(format!(
            "{which} ({opens}, probes after {})",
            human(breaker.cooldown)
        ));
    }
    if let Some(bulkhead) = config.bulkhead {
        let limit = match bulkhead.size {
            BulkheadSize::Fixed(limit) => limit.to_string(),
            BulkheadSize::Adaptive(min, max) => format!("adapting within {min}..{max}"),
        };
        let scope = per_key(bulkhead.per_key);
        parts.push(match config.bulkhead_queue {
            Some(queue) => format!("bulkhead {limit}{scope} with a queue of {queue}"),
            None => format!("bulkhead {limit}{scope}"),
        });
    }
    let rate = |name: &str, rate: &Rate| {
        let unit = match rate.period.as_secs() {
            1 => "s",
            60 => "min",
            _ => "h",
        };
        if rate.auto {
            return "learnt from the provider's answers".to_owned();
        }
        let exact = match (rate.exact, rate.learn) {
            (true, _) => ", exact",
            (false, true) => ", following the provider's answers",
            (false, false) => "",
        };
        if rate.burst == default_burst(name, rate.count) {
            format!("{}/{unit}{exact}", rate.count)
        } else {
            format!("{}/{unit} (burst {}){exact}", rate.count, rate.burst)
        }
    };
    if let Some(limit) = &config.rate {
        parts.push(format!(
            "rate {}{}",
            rate("rate", limit),
            per_key(limit.per_key)
        ));
    }
    if let Some((limit, cost)) = &config.token_rate {
        parts.push(format!(
            "token rate {}{}, each attempt costing `{}`",
            rate("token_rate", limit),
            per_key(limit.per_key),
            as_written(cost.to_token_stream()).replace(' ', "")
        ));
    }
    if let Some(route) = &config.route {
        let targets = as_written(route.targets.to_token_stream());
        parts.push(format!(
            "routed: `{}`, then `{targets}`, skipping a target that would make no call and moving on after a failure",
            route.argument.ident
        ));
    }
    if let Some(hedge) = config.hedge {
        let attempts = if hedge.count == 1 {
            "attempt"
        } else {
            "attempts"
        };
        parts.push(format!(
            "hedged: up to {} more {attempts} racing a slow one, each after {}",
            hedge.count,
            human(hedge.delay)
        ));
    }
    if let (Some(_), Some(max_keys)) = (key, config.max_keys) {
        parts.push(format!("at most {max_keys} keys"));
    }
    if let Some(shared) = &config.shared {
        parts.push(format!(
            "shared through Redis (waits {} for it, then {})",
            human(
                shared
                    .timeout
                    .unwrap_or(resil_spec::defaults::SHARED_TIMEOUT)
            ),
            if shared.fail_closed {
                "refuses"
            } else {
                "decides locally"
            }
        ));
    }
    if let Some(fallback) = &config.fallback {
        parts.push(format!(
            "fallback `{}`",
            fallback.to_token_stream().to_string().replace(' ', "")
        ));
    }
    let worst_case = |retry_after_max| {
        resil_spec::worst_case(
            config.timeout,
            config.deadline,
            config.retry,
            (base, cap),
            jitter,
            retry_after_max,
        )
    };
    let seconds = |worst: std::time::Duration| worst.as_millis() as f64 / 1000.0;
    let worst = match (
        worst_case(std::time::Duration::ZERO),
        worst_case(retry_after_max),
    ) {
        // A caller waits for its rate slot or its place in the queue as long as the deadline
        // allows; without one, nothing bounds that wait.
        _ if waits(config) => match config.deadline {
            Some(deadline) => format!(
                "worst case {} s: callers wait for a rate slot or a place in the queue as long as the `deadline` allows",
                seconds(deadline)
            ),
            None => "worst case unbounded: callers wait for a rate slot or a place in the queue, and no `deadline` bounds the wait".to_owned(),
        },
        (Some(quiet), Some(asked)) if asked > quiet => format!(
            "worst case {} s, or {} s when the server asks to wait (Retry-After, up to {} a retry)",
            seconds(quiet),
            seconds(asked),
            human(retry_after_max)
        ),
        (Some(worst), _) => format!("worst case {} s", seconds(worst)),
        (None, _) => "worst case unbounded: no `timeout` or `deadline`".to_owned(),
    };
    let fallback_note = if config.fallback.is_some() {
        ", plus the fallback's"
    } else {
        ""
    };
    let line = match &config.stream {
        None => format!("{}: {worst}{fallback_note}.", parts.join(", ")),
        Some(stream) => {
            let after = match (config.deadline, stream.idle_timeout) {
                (Some(deadline), _) => format!("ends by the deadline, {}", human(deadline)),
                (None, Some(idle)) => {
                    format!("has no end but its own, each gap at most {}", human(idle))
                }
                (None, None) => "has no bound at all".to_owned(),
            };
            format!(
                "{}: to the first item, {worst}{fallback_note}; the stream then {after}.",
                parts.join(", ")
            )
        }
    };
    vec![
        syn::parse_quote!(#[doc = ""]),
        syn::parse_quote!(#[doc = "# Resilience"]),
        syn::parse_quote!(#[doc = ""]),
        syn::parse_quote!(#[doc = #line]),
    ]
}

/// Does the function wait in a gate or a queue (as long as its deadline allows)?
fn waits(config: &Config) -> bool {
    config.rate.is_some() || config.token_rate.is_some() || config.bulkhead_queue.is_some()
}

/// An expression of the attribute as written: `self` where `#[async_trait]` made it `__self`.
fn as_written(tokens: proc_macro2::TokenStream) -> String {
    crate::idents::renamed(tokens, "__self", "self").to_string()
}
