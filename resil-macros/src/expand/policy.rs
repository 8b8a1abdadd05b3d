//! The policy a function declares, built once in a `static`: each key of the attribute
//! becomes one builder call.

use proc_macro2::{Ident, Literal, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

use crate::valid::Config;
use crate::values::{BulkheadSize, Rate};
use resil_spec::{BreakerKind, WindowSize};

pub(super) fn policy(config: &Config, name: &Ident) -> TokenStream {
    let name = name.to_string();
    let mut calls = vec![quote! {
        .name(::core::concat!(::core::module_path!(), "::", #name))
    }];
    if let Some(timeout) = config.timeout {
        let timeout = duration(timeout);
        calls.push(quote! { .timeout(#timeout) });
    }
    if let Some(deadline) = config.deadline {
        let deadline = duration(deadline);
        calls.push(quote! { .deadline(#deadline) });
    }
    if let Some(idle) = config
        .stream
        .as_ref()
        .and_then(|stream| stream.idle_timeout)
    {
        let idle = duration(idle);
        calls.push(quote! { .idle_timeout(#idle) });
    }
    if let Some(hold) = config.stream.as_ref().and_then(|stream| stream.commit_hold) {
        let hold = Literal::u32_unsuffixed(hold);
        calls.push(quote! { .commit_hold(#hold) });
    }
    if config.retry > 0 {
        let retry = Literal::u32_unsuffixed(config.retry);
        calls.push(quote! { .retry(#retry) });
    }
    if let Some(hedge) = config.hedge {
        let (count, delay) = (Literal::u32_unsuffixed(hedge.count), duration(hedge.delay));
        calls.push(quote! { .hedge(#count, #delay) });
    }
    if let Some(longest) = config.retry_after_max {
        let longest = duration(longest);
        calls.push(quote! { .retry_after_max(#longest) });
    }
    if let Some((base, cap)) = config.backoff {
        let (base, cap) = (duration(base), duration(cap));
        calls.push(quote! { .backoff(#base, #cap) });
    }
    if let Some(jitter) = config.jitter {
        let variant = format_ident!("{}", jitter.variant());
        calls.push(quote! { .jitter(::resil::__private::Jitter::#variant) });
    }
    if let Some(key) = &config.key {
        let label = &key.label;
        calls.push(quote! { .keyed(#label) });
    }
    if let Some(breaker) = &config.breaker {
        let (threshold, cooldown) = (
            Literal::u32_unsuffixed(breaker.threshold),
            duration(breaker.cooldown),
        );
        calls.push(match &breaker.named {
            Some(name) => quote! { .breaker_named(#name, #threshold, #cooldown) },
            // valid::check gives every breaker per key its key.
            None => {
                let label = config.key.as_ref().map_or("", |key| key.label.as_str());
                quote! { .breaker_per_key(#label, #threshold, #cooldown) }
            }
        });
    }
    if let Some(breaker) = &config.breaker {
        let window_tokens = |window| match window {
            WindowSize::Calls(calls) => {
                let calls = Literal::u32_unsuffixed(calls);
                quote! { ::resil::__private::WindowSize::Calls(#calls) }
            }
            WindowSize::Time(time) => {
                let time = duration(time);
                quote! { ::resil::__private::WindowSize::Time(#time) }
            }
        };
        let kind = match breaker.kind {
            BreakerKind::Consecutive => None,
            BreakerKind::FailureRate {
                percent,
                window,
                min_calls,
            } => {
                let window = window_tokens(window);
                Some(
                    quote! { FailureRate { percent: #percent, window: #window, min_calls: #min_calls } },
                )
            }
            BreakerKind::SlowCall {
                percent,
                slower_than,
                window,
                min_calls,
            } => {
                let slower_than = duration(slower_than);
                let window = window_tokens(window);
                Some(
                    quote! { SlowCall { percent: #percent, slower_than: #slower_than, window: #window, min_calls: #min_calls } },
                )
            }
        };
        if let Some(kind) = kind {
            calls.push(quote! { .breaker_kind(::resil::__private::BreakerKind::#kind) });
        }
    }
    if let Some(max_keys) = config.max_keys {
        let max_keys = Literal::u32_unsuffixed(max_keys);
        calls.push(quote! { .max_keys(#max_keys) });
    }
    if let Some(bulkhead) = config.bulkhead {
        calls.push(match bulkhead.size {
            BulkheadSize::Fixed(limit) => {
                let limit = Literal::u32_unsuffixed(limit);
                quote! { .bulkhead(#limit) }
            }
            BulkheadSize::Adaptive(min, max) => {
                let (min, max) = (
                    Literal::usize_unsuffixed(min),
                    Literal::usize_unsuffixed(max),
                );
                quote! { .bulkhead_adaptive(#min, #max) }
            }
        });
        if bulkhead.per_key {
            calls.push(quote! { .bulkhead_per_key() });
        }
    }
    if let Some(queue) = config.bulkhead_queue {
        let queue = Literal::u32_unsuffixed(queue);
        calls.push(quote! { .bulkhead_queue(#queue) });
    }
    if config.priority.is_some() {
        calls.push(quote! { .by_priority() });
    }
    if config.fair.is_some() {
        calls.push(quote! { .fair() });
    }
    if let Some(percent) = config.rate.as_ref().and_then(|rate| rate.batch) {
        let percent = Literal::u8_unsuffixed(percent as u8);
        calls.push(quote! { .rate_batch_share(#percent) });
    }
    if let Some(percent) = config.token_rate.as_ref().and_then(|(rate, _)| rate.batch) {
        let percent = Literal::u8_unsuffixed(percent as u8);
        calls.push(quote! { .token_rate_batch_share(#percent) });
    }
    let gate = |rate: &Rate| {
        let count = Literal::u64_unsuffixed(rate.count);
        let burst = Literal::u64_unsuffixed(rate.burst);
        let period = duration(rate.period);
        quote! { (#count, #period, #burst) }
    };
    if let Some(rate) = &config.rate {
        if !rate.auto {
            let arguments = gate(rate);
            calls.push(quote! { .rate #arguments });
        }
        if rate.exact {
            calls.push(quote! { .rate_exact() });
        }
        if rate.learn {
            calls.push(quote! { .rate_learn() });
        }
        if rate.per_key {
            calls.push(quote! { .rate_per_key() });
        }
    }
    if let Some((rate, _)) = &config.token_rate {
        if !rate.auto {
            let arguments = gate(rate);
            calls.push(quote! { .token_rate #arguments });
        }
        if rate.exact {
            calls.push(quote! { .token_rate_exact() });
        }
        if rate.learn {
            calls.push(quote! { .token_rate_learn() });
        }
        if rate.per_key {
            calls.push(quote! { .token_rate_per_key() });
        }
    }
    if let Some(budget) = config.retry_budget {
        let (ratio, min_per_sec) = (budget.percent / 100.0, budget.min_per_sec);
        calls.push(quote! { .retry_budget(#ratio, #min_per_sec) });
    }
    if config.independent {
        calls.push(quote! { .independent(true) });
    }
    if let Some(shared) = &config.shared {
        let timeout = match shared.timeout {
            Some(timeout) => {
                let timeout = duration(timeout);
                quote! { ::core::option::Option::Some(#timeout) }
            }
            None => quote! { ::core::option::Option::None },
        };
        let fail_closed = shared.fail_closed;
        calls.push(quote! { .__shared(#timeout, #fail_closed) });
    }
    if let Some(listener) = &config.listener {
        calls
            .push(quote_spanned! {listener.span()=> .listener(::std::sync::Arc::new(&#listener)) });
    }
    quote! { ::resil::__private::site_policy(::resil::__private::Policy::builder() #(#calls)*) }
}

pub(super) fn duration(duration: std::time::Duration) -> TokenStream {
    let nanos = duration.as_nanos() as u64;
    if nanos % 1_000_000 == 0 {
        let millis = Literal::u64_unsuffixed(nanos / 1_000_000);
        quote! { ::resil::__private::Duration::from_millis(#millis) }
    } else {
        let nanos = Literal::u64_unsuffixed(nanos);
        quote! { ::resil::__private::Duration::from_nanos(#nanos) }
    }
}
