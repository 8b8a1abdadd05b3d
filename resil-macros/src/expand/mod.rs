//! The expansion of `#[resilient]`: the signature stays as written, the body becomes a short
//! call of the runtime (a `static` policy, then one fresh `async` block per attempt).

use proc_macro2::{Ident, Literal, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

mod arguments;
mod docs;

use arguments::{allow_unused_mut, clones, takes_self_by_value, ReplaceSelf};
use docs::docs;

use crate::attr;
use crate::errors::Errors;
use crate::values::Rate;

use crate::valid::{self, Config, KeyArgument, KeyPart, KeyValue, StreamShape};
use resil_spec::BreakerKind;

/// `#[resilient(args)] item`: the rewritten function, or the function as written plus the
/// errors, so one mistake does not cascade into "cannot find function" errors.
pub(crate) fn resilient(args: TokenStream, item: TokenStream) -> TokenStream {
    let function = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = not_a_function(error, &item);
            return with_error(item, error);
        }
    };
    let mut errors = Errors::default();
    let config = attr::parse(args, &mut errors)
        .and_then(|parsed| valid::check(parsed, &function.sig, errors));
    match config {
        Ok(config) => expand(function, &config),
        Err(error) => with_error(function.into_token_stream(), error),
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote! { #item #error }
}

fn not_a_function(error: syn::Error, item: &TokenStream) -> syn::Error {
    match syn::parse2::<syn::TraitItemFn>(item.clone()) {
        Ok(declaration) if declaration.default.is_none() => syn::Error::new(
            declaration.semi_token.map_or_else(|| declaration.sig.span(), |semi| semi.span),
            "#[resilient] wraps a body, and this trait method has none: put the attribute on the method in each `impl` of the trait",
        ),
        Ok(_) => error,
        Err(_) => syn::Error::new(
            Span::call_site(),
            "#[resilient] goes on an `async fn` (a free function, or a method in an `impl` block)",
        ),
    }
}

// Input:  #[resilient(timeout = "20s", retry = 2, breaker = "per_model")]
//         async fn complete(&self, model: &str, req: Request) -> Result<T, E> { body }
// Output: async fn complete(&self, model: &str, req: Request) -> Result<T, E> {
//             static __RESIL_POLICY: LazyLock<Policy<Keyed>> = LazyLock::new(|| Policy::builder()...);
//             let __resil_outcome = {
//                 let mut __resil_execution = __RESIL_POLICY.execute_keyed(model);
//                 loop {
//                     let req = clone_for_retry(&req);
//                     if let Next::Done(o) = attempt::<Result<T, E>, _>(&mut __resil_execution, async { body }).await {
//                         break o;
//                     }
//                 }
//             };
//             __resil_outcome.into_result() // or the fallback, once the execution gave back its permit
//         }
// With `rate_cost`, each attempt first sets its cost (`__resil_execution.set_cost(..)`). A
// streaming fn (`Result<impl Stream<Item = Result<T, E>>, E>`) calls `stream_attempt::<T, E>`
// instead, and `commit` hands the execution's permit and breaker to the returned stream.
fn expand(function: ItemFn, config: &Config) -> TokenStream {
    let ItemFn {
        mut attrs,
        vis,
        mut sig,
        block,
    } = function;
    attrs.extend(docs(config));
    let ReturnType::Type(_, output) = sig.output.clone() else {
        unreachable!("valid::check requires a return type")
    };
    let policy = policy(config, &sig.ident);
    let execution = execution(config);
    let clones = if config.clones_arguments() {
        allow_unused_mut(&mut sig);
        clones(&sig)
    } else {
        TokenStream::new()
    };
    let mut block = *block;
    if config.clones_arguments() && takes_self_by_value(&sig) {
        ReplaceSelf.visit_block_mut(&mut block);
    }
    // One span for the whole call, so a missing bound on the error type is reported once,
    // at the error type, rather than once per place the compiler checks it.
    let blame = error_type_span(&output);
    let output = respan(output.to_token_stream(), blame);
    let attempt = match &config.stream {
        None => quote_spanned! {blame=>
            ::resil::__private::attempt::<#output, _>(&mut __resil_execution, async #block).await
        },
        Some(StreamShape {
            item,
            error,
            commit_when,
            complete_when,
            ..
        }) => {
            // The final item commits too: a server that holds the connection open after it
            // must not stall the attempt.
            let commits = match (commit_when, complete_when) {
                (None, _) => quote! { |_: &#item| true },
                (Some(commits), None) => quote_spanned! {commits.span()=>
                    ::resil::__private::commit_when::<#item>(#commits)
                },
                (Some(commits), Some(is_final)) => quote_spanned! {commits.span()=>
                    {
                        let __resil_commits = ::resil::__private::commit_when::<#item>(#commits);
                        let __resil_final = ::resil::__private::complete_when::<#item>(#is_final);
                        move |__resil_item: &#item| __resil_commits(__resil_item) || __resil_final(__resil_item)
                    }
                },
            };
            quote_spanned! {blame=>
                ::resil::__private::stream_attempt::<#item, #error, _, _, _>(&mut __resil_execution, async #block, #commits).await
            }
        }
    };
    // The cost is evaluated once per attempt, over that attempt's arguments.
    let clones = match &config.token_rate {
        Some((_, cost)) => quote_spanned! {cost.span()=>
            #clones
            __resil_execution.set_cost(::resil::__private::cost(#cost));
        },
        None => clones,
    };
    let outcome = if config.retry > 0 {
        quote! {
            loop {
                #clones
                if let ::resil::__private::Next::Done(__resil_outcome) = #attempt {
                    break __resil_outcome;
                }
            }
        }
    } else {
        quote! {{
            #clones
            ::resil::__private::single(#attempt)
        }}
    };
    // A failure the fallback will serve counts as such (outcome `fallback` in the metrics).
    let outcome = match &config.fallback {
        Some(_) => quote! {{
            let __resil_outcome = #outcome;
            ::resil::__private::mark_fallback(&mut __resil_execution, &__resil_outcome);
            __resil_outcome
        }},
        None => outcome,
    };
    let finish = match &config.fallback {
        None => quote! { __resil_outcome.into_result() },
        Some(fallback) => {
            let arguments = sig.inputs.iter().map(|input| match input {
                FnArg::Receiver(receiver) => receiver.self_token.to_token_stream(),
                FnArg::Typed(arg) => match &*arg.pat {
                    Pat::Ident(ident) => ident.ident.to_token_stream(),
                    other => other.to_token_stream(),
                },
            });
            let call = quote_spanned! {fallback.span()=> #fallback(#(#arguments),*).await };
            if config.stream.is_some() {
                // The fallback's stream is another type: the function returns either.
                quote! {
                    match __resil_outcome {
                        ::resil::__private::Outcome::Failed(_) => #call
                            .map(|stream| ::resil::__private::OrFallback::Fallback(::std::boxed::Box::pin(stream))),
                        __resil_outcome => __resil_outcome
                            .into_result()
                            .map(::resil::__private::OrFallback::Primary),
                    }
                }
            } else {
                quote! {
                    match __resil_outcome {
                        ::resil::__private::Outcome::Failed(_) => #call,
                        __resil_outcome => __resil_outcome.into_result(),
                    }
                }
            }
        }
    };
    // A stream takes over the execution's permit and breaker once committed.
    let outcome = match &config.stream {
        None => outcome,
        Some(StreamShape {
            item,
            complete_when,
            ..
        }) => {
            let complete_when = match complete_when {
                Some(path) => quote_spanned! {path.span()=>
                    ::core::option::Option::Some(::resil::__private::complete_when::<#item>(#path))
                },
                None => quote! { ::core::option::Option::None },
            };
            quote! {{
                let __resil_outcome = #outcome;
                ::resil::__private::commit(__resil_execution, __resil_outcome, #complete_when)
            }}
        }
    };
    let policy_type = if config.key.is_some() {
        quote! { ::resil::__private::Policy<::resil::__private::Keyed> }
    } else {
        quote! { ::resil::__private::Policy }
    };
    // Without resil's `redis` feature, `shared = true` is a compile error at the key.
    let shared = config.shared.as_ref().map(|shared| {
        quote_spanned! {shared.span=> ::resil::__resil_shared!(); }
    });
    // The execution (bulkhead permit, breaker admission) ends with the block, before any
    // fallback runs: a fallback may call this function again.
    quote! {
        #(#attrs)*
        #vis #sig {
            static __RESIL_POLICY: ::resil::__private::LazyLock<#policy_type> =
                ::resil::__private::LazyLock::new(|| #policy);
            ::resil::__resil_site!(__RESIL_POLICY);
            #shared
            let __resil_outcome = {
                let mut __resil_execution = #execution;
                #outcome
            };
            #finish
        }
    }
}

/// The span of `E` in `Result<T, E>`, or of the whole return type for an alias.
fn error_type_span(output: &Type) -> Span {
    if let Type::Path(path) = output {
        if let Some(syn::PathArguments::AngleBracketed(args)) =
            path.path.segments.last().map(|segment| &segment.arguments)
        {
            if let Some(syn::GenericArgument::Type(error)) = args.args.iter().nth(1) {
                return error.span();
            }
        }
    }
    output.span()
}

fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut respanned =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                token = TokenTree::Group(respanned);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}

fn duration(duration: std::time::Duration) -> TokenStream {
    let nanos = duration.as_nanos() as u64;
    if nanos % 1_000_000 == 0 {
        let millis = Literal::u64_unsuffixed(nanos / 1_000_000);
        quote! { ::resil::__private::Duration::from_millis(#millis) }
    } else {
        let nanos = Literal::u64_unsuffixed(nanos);
        quote! { ::resil::__private::Duration::from_nanos(#nanos) }
    }
}

fn policy(config: &Config, name: &Ident) -> TokenStream {
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
    if config.retry > 0 {
        let retry = Literal::u32_unsuffixed(config.retry);
        calls.push(quote! { .retry(#retry) });
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
        let kind = match breaker.kind {
            BreakerKind::Consecutive => None,
            BreakerKind::FailureRate {
                percent,
                window,
                min_calls,
            } => Some(
                quote! { FailureRate { percent: #percent, window: #window, min_calls: #min_calls } },
            ),
            BreakerKind::SlowCall {
                percent,
                slower_than,
                window,
                min_calls,
            } => {
                let slower_than = duration(slower_than);
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
        let limit = Literal::u32_unsuffixed(bulkhead.limit);
        calls.push(quote! { .bulkhead(#limit) });
        if bulkhead.per_key {
            calls.push(quote! { .bulkhead_per_key() });
        }
    }
    if let Some(queue) = config.bulkhead_queue {
        let queue = Literal::u32_unsuffixed(queue);
        calls.push(quote! { .bulkhead_queue(#queue) });
    }
    let gate = |rate: &Rate| {
        let count = Literal::u64_unsuffixed(rate.count);
        let burst = Literal::u64_unsuffixed(rate.burst);
        let period = duration(rate.period);
        quote! { (#count, #period, #burst) }
    };
    if let Some(rate) = &config.rate {
        let arguments = gate(rate);
        calls.push(quote! { .rate #arguments });
        if rate.per_key {
            calls.push(quote! { .rate_per_key() });
        }
    }
    if let Some((rate, _)) = &config.token_rate {
        let arguments = gate(rate);
        calls.push(quote! { .token_rate #arguments });
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

fn execution(config: &Config) -> TokenStream {
    let Some(key) = &config.key else {
        return quote! { __RESIL_POLICY.execute() };
    };
    // The key is borrowed for the lookup: an argument declared as a reference as it is,
    // anything else by reference.
    let part = |part: &KeyPart| match part {
        KeyPart::Argument(KeyArgument {
            ident,
            by_ref: true,
        }) => quote! { #ident },
        KeyPart::Argument(KeyArgument { ident, .. }) => quote! { &#ident },
        KeyPart::Expr(expr) => quote_spanned! {expr.span()=> &(#expr) },
    };
    match &key.value {
        KeyValue::One(one) => {
            let key = part(one);
            quote! { __RESIL_POLICY.execute_keyed(#key) }
        }
        KeyValue::Tuple(parts) => {
            let parts = parts.iter().map(part);
            quote! { __RESIL_POLICY.execute_keyed(&::resil::__private::KeyTuple((#(#parts,)*))) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(attr: TokenStream, item: TokenStream) -> String {
        resilient(attr, item).to_string()
    }

    #[test]
    fn docs_of_a_stream_speak_of_the_first_item_and_the_deadline() {
        let out = expanded(
            quote! { first_item_timeout = "20s", idle_timeout = "30s", deadline = "5m", retry = 1 },
            quote! {
                async fn f() -> Result<impl Stream<Item = Result<Chunk, E>>, E> { todo!() }
            },
        );
        assert!(out.contains(
            "first item within 20s, idle timeout 30s, deadline 5m, retry 1, backoff 300ms..8s: to the first item, worst case 40.3 s, or 100.3 s when the server asks to wait (Retry-After, up to 1m a retry); the stream then ends by the deadline, 5m."
        ), "{out}");
        let out = expanded(
            quote! { first_item_timeout = "20s", idle_timeout = "30s" },
            quote! {
                async fn f() -> Result<impl Stream<Item = Result<Chunk, E>>, E> { todo!() }
            },
        );
        assert!(
            out.contains("to the first item, worst case 20 s; the stream then has no end but its own, each gap at most 30s."),
            "{out}"
        );
    }

    #[test]
    fn shared_state_is_declared_and_documented() {
        let out = expanded(
            quote! { rate = "10/s", shared = true, shared_timeout = "20ms", shared_fail = "closed" },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(out.contains(":: resil :: __resil_shared ! ()"), "{out}");
        assert!(out.contains(". __shared ("), "{out}");
        assert!(
            out.contains("shared through Redis (waits 20ms for it, then refuses)"),
            "{out}"
        );
        let out = expanded(
            quote! { breaker = "openai", shared = false },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(!out.contains("__shared"), "{out}");
    }

    #[test]
    fn docs_state_the_policy_and_its_worst_case() {
        let out = expanded(
            quote! { timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8 },
            quote! { async fn complete(&self, model: &str) -> Result<String, E> { todo!() } },
        );
        assert!(out.contains(
            "timeout 20s, retry 2, backoff 300ms..8s, a breaker per `model` (opens after 5 failures, probes after 30s), bulkhead 8: worst case 60.9 s, or 180.9 s when the server asks to wait (Retry-After, up to 1m a retry)."
        ), "{out}");
        let out = expanded(
            quote! { timeout = "8s", retry = 1 },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(
            out.contains("timeout 8s, retry 1, backoff 300ms..8s: worst case 16.3 s, or 76.3 s when the server asks to wait"),
            "{out}"
        );
        let out = expanded(
            quote! { timeout = "8s", retry = 1, retry_after_max = "5s" },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(
            out.contains("timeout 8s, retry 1, backoff 300ms..8s, Retry-After up to 5s: worst case 16.3 s, or 21.3 s when the server asks to wait (Retry-After, up to 5s a retry)."),
            "{out}"
        );
        let out = expanded(
            quote! { timeout = "20s", deadline = "45s", retry = 2 },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(out.contains("worst case 45 s."), "{out}");
        let out = expanded(
            quote! { retry = 2 },
            quote! { async fn f() -> Result<(), E> { Ok(()) } },
        );
        assert!(out.contains("worst case unbounded"), "{out}");
    }

    #[test]
    fn hardening_keys_reach_the_builder() {
        let out = expanded(
            quote! { retry = 1, retry_after_max = "5s", breaker = "per_user", max_keys = 500 },
            quote! { async fn f(user: u64) -> Result<(), E> { Ok(()) } },
        );
        assert!(
            out.contains(
                ". retry_after_max (:: resil :: __private :: Duration :: from_millis (5000))"
            ),
            "{out}"
        );
        assert!(out.contains(". max_keys (500)"), "{out}");
        assert!(
            out.contains("Policy < :: resil :: __private :: Keyed >"),
            "{out}"
        );
    }

    #[test]
    fn the_signature_is_kept_and_errors_keep_the_function() {
        let out = expanded(
            quote! { retries = 2 },
            quote! { pub(crate) async fn f<'a, T: Clone>(x: &'a T) -> Result<T, E> where T: Send { Ok(x.clone()) } },
        );
        assert!(out.contains("pub (crate) async fn f < 'a , T : Clone > (x : & 'a T) -> Result < T , E > where T : Send"), "{out}");
        assert!(out.contains("compile_error"), "{out}");
    }

    #[test]
    fn a_profile_fills_what_the_attribute_leaves_unsaid() {
        let item = quote! { async fn call(&self) -> Result<String, E> { todo!() } };
        let out = expanded(quote! { profile = "llm", breaker = "openai" }, item.clone());
        for call in [
            ". timeout (:: resil :: __private :: Duration :: from_millis (60000))",
            ". retry (2)",
            ". retry_after_max (:: resil :: __private :: Duration :: from_millis (60000))",
            ". backoff (:: resil :: __private :: Duration :: from_millis (2000) , :: resil :: __private :: Duration :: from_millis (30000))",
            ". breaker_named (\"openai\" , 3 , :: resil :: __private :: Duration :: from_millis (60000))",
        ] {
            assert!(out.contains(call), "{call} missing from {out}");
        }
        assert!(out.contains("profile `llm`"), "{out}");

        let out = expanded(
            quote! { profile = "payment", timeout = "2s", retry = 0 },
            item.clone(),
        );
        assert!(
            out.contains(". timeout (:: resil :: __private :: Duration :: from_millis (2000))"),
            "{out}"
        );
        assert!(
            !out.contains(". retry ("),
            "a key beside the profile wins: {out}"
        );
        assert!(!out.contains(". jitter ("), "no retry, no jitter: {out}");

        for profile in resil_spec::profiles::ALL {
            let name = profile.name;
            let out = expanded(quote! { profile = #name }, item.clone());
            let retry = profile.retry.unwrap_or(0);
            assert_eq!(
                out.contains(&format!(". retry ({retry})")),
                retry > 0,
                "{name}: {out}"
            );
            if let Some(timeout) = profile.timeout {
                let millis = timeout.as_millis();
                assert!(
                    out.contains(&format!("from_millis ({millis}))")),
                    "{name}: {out}"
                );
            }
        }
    }
}
