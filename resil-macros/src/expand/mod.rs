//! The expansion of `#[resilient]`: the signature stays as written, the body becomes a short
//! call of the runtime (a `static` policy, then one fresh `async` block per attempt).

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

mod arguments;
mod async_trait;
mod docs;
mod execution;
mod policy;

use arguments::{allow_unused_mut, clones, takes_self_by_value, ReplaceSelf};
use async_trait::AsyncTrait;
use docs::docs;
use execution::execution;
use policy::policy;

use crate::attr;
use crate::errors::Errors;

use crate::valid::{self, Config, StreamShape};

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
    // Inside an `#[async_trait]` impl or trait, the method as it was written; its receiver
    // is `__self` there (async-trait moved it), in the attribute's expressions too.
    let rewritten = AsyncTrait::recognise(&function);
    let args = match rewritten {
        Some(_) => crate::idents::renamed(args, "self", "__self"),
        None => args,
    };
    let sig = rewritten
        .as_ref()
        .map_or(&function.sig, |method| &method.sig);
    let mut errors = Errors::default();
    let config =
        attr::parse(args, &mut errors).and_then(|parsed| valid::check(parsed, sig, errors));
    match (config, rewritten) {
        (Ok(config), None) => expand(function, &config),
        (Ok(config), Some(method)) => {
            let (mut sig, block) = (method.sig.clone(), method.body.clone());
            let body = body(&mut sig, block, &config);
            method.with_body(docs(&config), body).into_token_stream()
        }
        (Err(error), _) => with_error(function.into_token_stream(), error),
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
        // Above `#[async_trait]` on the block: the attribute belongs on each method inside,
        // where it sees what async-trait made of it.
        Err(_) if syn::parse2::<syn::ItemImpl>(item.clone()).is_ok()
            || syn::parse2::<syn::ItemTrait>(item.clone()).is_ok() =>
        {
            syn::Error::new(
                Span::call_site(),
                "#[resilient] goes on each method, not on the `impl` or `trait` block: write it above the `async fn` inside the block (under `#[async_trait]` too)",
            )
        }
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
//                 let mut __resil_execution = keyed_execution(&__RESIL_POLICY, model);
//                 loop {
//                     let req = clone_for_retry(&req);
//                     if let Next::Done(o) = attempt::<Result<T, E>, _>(&mut __resil_execution, async { body }).await {
//                         break o;
//                     }
//                 }
//             };
//             __resil_outcome.into_result() // or the fallback, once the execution gave back its permit
//         }
// With `route = model in [..]`, a `Route` over the caller's `model` and the listed values
// stands for the execution: each turn of the loop binds `model` to the route's next target and
// runs the attempt on the route's execution, which ends the operation as above.
// `{ body }` is `{ if let Some(r) = None::<Result<T, E>> { return r; } { body } }`, typed as
// the function, so that its returns coerce as the function's would.
// With `rate_cost`, each attempt first sets its cost (`__resil_execution.set_cost(..)`). A
// streaming fn (`Result<impl Stream<Item = Result<T, E>>, E>`) calls `stream_attempt::<T, E>`
// instead, with a `Commit` that names its committing and final items, and
// `__resil_execution.commit(..)` hands the execution's permit and breaker to the stream.
fn expand(function: ItemFn, config: &Config) -> TokenStream {
    let ItemFn {
        mut attrs,
        vis,
        mut sig,
        block,
    } = function;
    attrs.extend(docs(config));
    let body = body(&mut sig, *block, config);
    quote! {
        #(#attrs)*
        #vis #sig #body
    }
}

/// The body that replaces `block`, in braces; `sig` keeps each `mut` of an argument copied
/// per attempt without the warning.
fn body(sig: &mut syn::Signature, block: syn::Block, config: &Config) -> TokenStream {
    let ReturnType::Type(_, output) = sig.output.clone() else {
        unreachable!("valid::check requires a return type")
    };
    let policy = policy(config, &sig.ident);
    let execution = execution(config);
    let clones = if config.clones_arguments() {
        allow_unused_mut(sig);
        clones(sig)
    } else {
        TokenStream::new()
    };
    let mut block = block;
    if config.clones_arguments() && takes_self_by_value(sig) {
        ReplaceSelf.visit_block_mut(&mut block);
    }
    // One span for the whole call, so a missing bound on the error type is reported once,
    // at the error type, rather than once per place the compiler checks it.
    let blame = error_type_span(&output);
    let output = respan(output.to_token_stream(), blame);
    // The block returns the function's type from its first line, so that what the function
    // coerces to it (`return Err(Box::new(e))` for a boxed error, its last expression) the
    // block coerces too, as async-trait's expansion does; a stream's `impl Stream` cannot be
    // named here. The body's statements go in braces of the expansion's own: its own braces
    // as the block's last expression would draw `unused_braces` on a one-line body, and bound
    // by a `let`, clippy's `diverging_sub_expression` on one that ends in `return`.
    let block = match &config.stream {
        None => {
            let statements = &block.stmts;
            let body = quote! { { #(#statements)* } };
            quote_spanned! {blame=> {
                if let ::core::option::Option::Some(__resil_returns) =
                    ::core::option::Option::None::<#output>
                {
                    return __resil_returns;
                }
                #body
            }}
        }
        Some(_) => block.to_token_stream(),
    };
    // A hedged function's racers are made by a closure, each with its own copies of the
    // arguments taken by value; the racers then share the borrowed ones.
    // A route's racers get their target, bound to the routed argument.
    // With `transient = path`, each attempt's error is judged by the path, and the runtime
    // sees `Judged<E>` (see `__private::judge`).
    let judged = match &config.transient {
        None => output.clone(),
        Some(_) => quote_spanned! {blame=> ::resil::__private::JudgedResult<#output> },
    };
    let judge = |attempt: TokenStream| match &config.transient {
        None => attempt,
        Some(classify) => {
            // A closure that calls the path: a path that is no function, or one of the wrong
            // type, is reported at the path.
            let classify = quote_spanned! {classify.span()=>
                |__resil_error: &_| ::resil::__private::classification(#classify(__resil_error))
            };
            quote_spanned! {blame=> ::resil::__private::judge::<#output, _>(#classify, #attempt) }
        }
    };
    let (body, clones) = match (&config.hedge, &config.route) {
        (Some(_), None) => {
            let attempt = judge(quote_spanned! {blame=> async move #block });
            (
                quote_spanned! {blame=> || { #clones #attempt } },
                TokenStream::new(),
            )
        }
        (Some(_), Some(route)) => {
            let argument = &route.argument.ident;
            let attempt = judge(quote_spanned! {blame=> async move #block });
            let racer = quote_spanned! {blame=>
                |__resil_target| {
                    let #argument = ::core::clone::Clone::clone(__resil_target);
                    #clones
                    #attempt
                }
            };
            (racer, TokenStream::new())
        }
        (None, _) => (judge(quote_spanned! {blame=> async #block }), clones),
    };
    let (run, run_stream, extra) = match (&config.hedge, &config.route) {
        (Some(_), None) => (
            quote! { race::<#judged, _, _> },
            quote! { stream_race },
            quote! { , _ },
        ),
        (Some(_), Some(_)) => (
            quote! { route_race::<#judged, _, _, _, _> },
            quote! { route_stream_race },
            quote! { , _, _, _ },
        ),
        (None, _) => (
            quote! { attempt::<#judged, _> },
            quote! { stream_attempt },
            TokenStream::new(),
        ),
    };
    // A route's attempts run on the route's execution, borrowed for each; its races on the
    // route itself.
    let execution_ref = match (&config.route, &config.hedge) {
        (None, _) => quote! { &mut __resil_execution },
        (Some(_), None) => quote! { __resil_execution },
        (Some(_), Some(_)) => quote! { &mut __resil_route },
    };
    let attempt = match &config.stream {
        None => quote_spanned! {blame=>
            // Awaited from a binding: a missing bound of the error type is one error, at it.
            {
                let __resil_attempt = ::resil::__private::#run(#execution_ref, #body);
                __resil_attempt.await
            }
        },
        Some(StreamShape {
            item,
            error,
            commit_when,
            complete_when,
            ..
        }) => {
            // The final item commits too (see `Commit`).
            let commit = match commit_when {
                None => quote! { ::resil::__private::Commit::<#item>::first_item() },
                Some(commits) => quote_spanned! {commits.span()=>
                    ::resil::__private::Commit::when(::resil::__private::commit_when::<#item>(#commits))
                },
            };
            let commit = match complete_when {
                None => commit,
                Some(is_final) => quote_spanned! {is_final.span()=>
                    #commit.complete_when(::resil::__private::complete_when::<#item>(#is_final))
                },
            };
            quote_spanned! {blame=>
                {
                    let __resil_attempt = ::resil::__private::#run_stream::<#item, #error, _, _ #extra>(#execution_ref, #body, #commit);
                    __resil_attempt.await
                }
            }
        }
    };
    // The cost is evaluated once per attempt (per race, when hedged: its hedges cost the
    // same), over that attempt's arguments; a route judges the targets' token gates with it,
    // so it is set before the route chooses.
    let cost = config
        .token_rate
        .as_ref()
        .map(|(_, cost)| execution::cost(cost));
    let clones = match (&cost, &config.route) {
        (Some(cost), None) => quote! {
            #clones
            __resil_execution.set_cost(#cost);
        },
        _ => clones,
    };
    let route_cost = match (&cost, &config.route) {
        (Some(cost), Some(_)) => quote! { __resil_route.execution().set_cost(#cost); },
        _ => TokenStream::new(),
    };
    let outcome = if let Some(route) = &config.route {
        // The argument is bound to each attempt's target; every target skipped ends the loop.
        let argument = &route.argument.ident;
        // A race binds the argument in each racer instead.
        let target = match &config.hedge {
            None => quote! {
                let #argument = match __resil_route.target().await {
                    ::core::result::Result::Ok(__resil_target) => ::core::clone::Clone::clone(__resil_target),
                    ::core::result::Result::Err(__resil_outcome) => break __resil_outcome,
                };
            },
            Some(_) => quote! {
                if let ::core::result::Result::Err(__resil_outcome) = __resil_route.target().await {
                    break __resil_outcome;
                }
            },
        };
        quote! {
            loop {
                #route_cost
                #target
                let __resil_execution = __resil_route.execution();
                #clones
                if let ::resil::__private::Next::Done(__resil_outcome) = #attempt {
                    break __resil_outcome;
                }
            }
        }
    } else if config.retry > 0 {
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
    // After a route's attempts, its execution ends the operation as any other's.
    let (routed, outcome) = match &config.route {
        None => (TokenStream::new(), outcome),
        Some(_) => (
            quote! {
                let __resil_routed = #outcome;
                #[allow(unused_mut)]
                let mut __resil_execution = __resil_route.into_execution();
            },
            quote! { __resil_routed },
        ),
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
        Some(_) => quote! {{
            let __resil_outcome = #outcome;
            __resil_execution.commit(__resil_outcome)
        }},
    };
    let start = match &config.route {
        None => quote! { __resil_execution },
        Some(_) => quote! { __resil_route },
    };
    // The class and the fair value are read once per call, from the arguments as the caller
    // gave them, spanned at the argument so that one of another type is reported there.
    let current = match &config.route {
        None => quote! { (&mut __resil_execution) },
        Some(_) => quote! { __resil_route.execution() },
    };
    let prioritize = config.priority.as_ref().map(|argument| {
        let ident = &argument.ident;
        quote_spanned! {ident.span()=>
            #current.set_priority(::resil::__private::priority(&#ident));
        }
    });
    let share = config.fair.as_ref().map(|argument| {
        let ident = &argument.ident;
        quote_spanned! {ident.span()=>
            ::resil::__private::FairKey::fair_for(&#ident, #current);
        }
    });
    let policy_type = if config.key.is_some() {
        quote! { ::resil::__private::Policy<::resil::__private::Keyed> }
    } else {
        quote! { ::resil::__private::Policy }
    };
    // Without resil's `redis` feature, `shared = true` is a compile error at the key.
    let shared = config.shared.as_ref().map(|shared| {
        quote_spanned! {shared.span=> ::resil::__resil_shared!(); }
    });
    // Back in the function's error type, once the execution has ended.
    let unjudged = config.transient.as_ref().map(|_| match &config.rejected {
        None => quote_spanned! {blame=>
            let __resil_outcome = ::resil::__private::unjudged(__resil_outcome);
        },
        // A closure that calls the path, so that a path of the wrong kind is reported there.
        Some(carry) => {
            let carry = quote_spanned! {carry.span()=>
                |__resil_rejected: ::resil::Rejected| #carry(__resil_rejected)
            };
            quote_spanned! {blame=>
                let __resil_outcome = ::resil::__private::unjudged_by(__resil_outcome, #carry);
            }
        }
    });
    // The execution (bulkhead permit, breaker admission) ends with the block, before any
    // fallback runs: a fallback may call this function again.
    quote! {
        {
            static __RESIL_POLICY: ::resil::__private::LazyLock<#policy_type> =
                ::resil::__private::LazyLock::new(|| #policy);
            ::resil::__resil_site!(__RESIL_POLICY);
            #shared
            let __resil_outcome = {
                let mut #start = #execution;
                #prioritize
                #share
                #routed
                #outcome
            };
            #unjudged
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

#[cfg(test)]
mod tests;
