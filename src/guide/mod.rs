//! The guide: one page per question a user of resil has, from the first annotated function
//! to running many instances. Every snippet is a doctest, compiled and run by
//! `cargo test --doc --all-features` (`no_run` only where it would call a real provider).
//!
//! | page | the question it answers |
//! |---|---|
//! | [`first_steps`] | How do I make one client call resilient, and what does it do in an outage? |
//! | [`adopting`] | My code returns `anyhow::Result`, a boxed error or another crate's error, through `#[async_trait]`: how do I adopt resil without changing it? |
//! | [`choosing_keys`] | A timeout, retries, a breaker, a bulkhead, a queue, a gate, a key: which do I need? |
//! | [`streams`] | How is a streaming answer retried, timed and cut? |
//! | [`rates_and_keys`] | How do I stay under a provider's limits, per model or per API key? |
//! | [`priority`] | When the limit is scarce, how do interactive calls go before batch, and no tenant starve another? |
//! | [`learning_limits`] | How do I follow the limits the provider states, and find how many calls it serves at once? |
//! | [`route_and_hedge`] | How do I fall over to another model or provider when one is down or out of quota? |
//! | [`many_instances`] | How do ten instances share one breaker and one rate limit? |
//! | [`configuration`] | How do I change a timeout while the program runs? |
//! | [`observability`] | What events, spans and metrics does resil report, and how do I graph them? |
//! | [`testing`] | How do I test my own code against the faults resil guards against? |
//! | [`migrating`] | I use backon, tower-resilience or reqwest-retry: what is the same in resil? |
//! | [`costs`] | What does a call through resil cost, against the peers? |
//! | [`design`] | How is resil built, and what does it never share? |
//! | [`reference`](mod@reference) | Every key of the attribute, generated from the table the macro reads. |
//!
//! A page whose snippets need a feature of the crate says so, and shows its text when the
//! docs are built with that feature (docs.rs builds them with all).

/// How a page that needs `features` reads in docs built without them.
#[allow(unused_macros)] // with every feature on, no page needs it
macro_rules! needs {
    ($features:literal) => {
        concat!(
            "This page needs `--features ",
            $features,
            "`: build the docs with them (or with `--all-features`) to read it, or read it on ",
            "docs.rs."
        )
    };
}

#[cfg_attr(feature = "reqwest", doc = include_str!("first_steps.md"))]
#[cfg_attr(not(feature = "reqwest"), doc = needs!("reqwest"))]
pub mod first_steps {}

#[cfg_attr(feature = "anyhow", doc = include_str!("adopting.md"))]
#[cfg_attr(not(feature = "anyhow"), doc = needs!("anyhow"))]
pub mod adopting {}

#[doc = include_str!("choosing_keys.md")]
pub mod choosing_keys {}

#[doc = include_str!("streams.md")]
pub mod streams {}

#[doc = include_str!("rates_and_keys.md")]
pub mod rates_and_keys {}

#[doc = include_str!("priority.md")]
pub mod priority {}

#[cfg_attr(feature = "http", doc = include_str!("learning_limits.md"))]
#[cfg_attr(not(feature = "http"), doc = needs!("http"))]
pub mod learning_limits {}

#[doc = include_str!("route_and_hedge.md")]
pub mod route_and_hedge {}

#[cfg_attr(feature = "redis", doc = include_str!("many_instances.md"))]
#[cfg_attr(not(feature = "redis"), doc = needs!("redis"))]
pub mod many_instances {}

#[cfg_attr(feature = "config", doc = include_str!("configuration.md"))]
#[cfg_attr(not(feature = "config"), doc = needs!("config"))]
pub mod configuration {}

#[doc = include_str!("observability.md")]
#[doc = include_str!("series.md")]
pub mod observability {}

#[cfg_attr(feature = "chaos", doc = include_str!("testing.md"))]
#[cfg_attr(not(feature = "chaos"), doc = needs!("chaos"))]
pub mod testing {}

#[cfg_attr(
    all(feature = "tower", feature = "reqwest-middleware"),
    doc = include_str!("migrating.md")
)]
#[cfg_attr(
    not(all(feature = "tower", feature = "reqwest-middleware")),
    doc = needs!("tower,reqwest-middleware")
)]
pub mod migrating {}

#[doc = include_str!("costs.md")]
pub mod costs {}

#[doc = include_str!("design.md")]
pub mod design {}

#[doc = include_str!("reference.md")]
#[doc = include_str!("keys.md")]
pub mod reference {}
