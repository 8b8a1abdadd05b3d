//! What the expansion looks like for each kind of declaration, read as tokens.

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
    // A caller waits its turn as long as the deadline allows, however short its attempts.
    let out = expanded(
        quote! { timeout = "100ms", deadline = "2s", rate = "1/s" },
        quote! { async fn f() -> Result<(), E> { Ok(()) } },
    );
    assert!(
        out.contains("worst case 2 s: callers wait for a rate slot or a place in the queue as long as the `deadline` allows"),
        "{out}"
    );
}

#[test]
fn hardening_keys_reach_the_builder() {
    let out = expanded(
        quote! { retry = 1, retry_after_max = "5s", breaker = "per_user", max_keys = 500 },
        quote! { async fn f(user: u64) -> Result<(), E> { Ok(()) } },
    );
    assert!(
        out.contains(". retry_after_max (:: resil :: __private :: Duration :: from_millis (5000))"),
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

#[test]
fn a_method_async_trait_rewrote_keeps_its_signature_and_guards_the_body_inside() {
    let out = expanded(
        quote! { timeout = "1s", retry = 1 },
        quote! {
            fn f<'life0, 'async_trait>(&'life0 self, n: String)
                -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u32, E>> + ::core::marker::Send + 'async_trait>>
            where 'life0: 'async_trait, Self: 'async_trait
            {
                Box::pin(async move {
                    if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<Result<u32, E>> {
                        #[allow(unreachable_code)]
                        return __ret;
                    }
                    let __self = self;
                    let mut n = n;
                    let __ret: Result<u32, E> = { __self.call(&mut n).await };
                    #[allow(unreachable_code)]
                    __ret
                })
            }
        },
    );
    assert!(!out.contains("compile_error"), "{out}");
    assert!(
        out.contains("fn f < 'life0 , 'async_trait > (& 'life0 self , n : String) -> :: core :: pin :: Pin <"),
        "{out}"
    );
    let inside = out
        .split("Box :: pin (async move")
        .nth(1)
        .unwrap_or_default();
    assert!(inside.contains("static __RESIL_POLICY"), "{out}");
    assert!(
        inside.contains("let mut n = :: resil :: __private :: clone_for_retry (& n)"),
        "{out}"
    );
    assert!(
        inside.contains("# [allow (unused_mut)] let mut n = n ;"),
        "{out}"
    );
}
