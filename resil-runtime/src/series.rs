//! The metric series resil reports with feature `metrics`: names, labels and what each counts,
//! with a Prometheus query for a dashboard. The names are fixed (dashboards and alerts are
//! written against them); the meter reports through these constants, and the guide's list is
//! [`markdown`], checked by a test against the copy it includes.
//!
//! ```
//! use resil_runtime::series;
//!
//! assert_eq!(series::CALLS.name, "resil_calls_total");
//! assert!(series::OUTCOMES.contains(&"breaker_open"));
//! assert!(series::ALL.iter().all(|series| series.name.starts_with("resil_")));
//! ```

/// One series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Series {
    /// Its name, as the recorder sees it.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it counts, and when it appears.
    pub meaning: &'static str,
    /// A Prometheus query for a dashboard panel or an alert.
    pub query: &'static str,
}

/// The values of `outcome` on [`CALLS`].
pub const OUTCOMES: [&str; 9] = [
    "ok",
    "error",
    "timeout",
    "deadline_exceeded",
    "breaker_open",
    "bulkhead_full",
    "rate_limited",
    "shared_unavailable",
    "fallback",
];

/// One per operation, by how it ended.
pub const CALLS: Series = Series {
    name: "resil_calls_total",
    kind: "counter",
    labels: &["fn", "outcome"],
    meaning: "one per operation, by how it ended: `ok`, `error`, `timeout`, `deadline_exceeded`, `breaker_open`, `bulkhead_full`, `rate_limited`, `shared_unavailable` (a shared policy failing closed while Redis does not answer) or `fallback` (served by the fallback); a cancelled operation counts nothing. Every outcome is registered at a policy's first call, so each starts at 0",
    query: r#"sum by (fn) (rate(resil_calls_total{outcome!="ok"}[5m])) / sum by (fn) (rate(resil_calls_total[5m]))"#,
};

/// One per attempt, the first included.
pub const ATTEMPTS: Series = Series {
    name: "resil_attempts_total",
    kind: "counter",
    labels: &["fn"],
    meaning: "one per attempt started, the first included",
    query: "sum by (fn) (rate(resil_attempts_total[5m]))",
};

/// One per retry.
pub const RETRIES: Series = Series {
    name: "resil_retries_total",
    kind: "counter",
    labels: &["fn"],
    meaning: "one per retry decided, counted as its wait begins",
    query:
        "sum by (fn) (rate(resil_retries_total[5m])) / sum by (fn) (rate(resil_calls_total[5m]))",
};

/// How long operations take.
pub const OPERATION_SECONDS: Series = Series {
    name: "resil_operation_seconds",
    kind: "histogram",
    labels: &["fn"],
    meaning:
        "how long each operation took, waits and retries included (for a stream: to its first item)",
    query: "histogram_quantile(0.95, sum by (fn, le) (rate(resil_operation_seconds_bucket[5m])))",
};

/// How long a stream takes to its first item.
pub const FIRST_ITEM_SECONDS: Series = Series {
    name: "resil_stream_first_item_seconds",
    kind: "histogram",
    labels: &["fn"],
    meaning: "how long a streaming operation took to its first item; registered at the first stream a function returns",
    query: "histogram_quantile(0.95, sum by (fn, le) (rate(resil_stream_first_item_seconds_bucket[5m])))",
};

/// Each breaker's state.
pub const BREAKER_STATE: Series = Series {
    name: "resil_breaker_state",
    kind: "gauge",
    labels: &["breaker", "key"],
    meaning: "0 closed, 1 half-open, 2 open (`key` empty for a named breaker). A key's series appears at its breaker's first transition, so only keys that failed get one; the recorder keeps it after the key is forgotten, so with keys from request input give the exporter an idle timeout",
    query: "max by (breaker, key) (resil_breaker_state) == 2",
};

/// A routed operation's attempts and skips, per target.
pub const ROUTE: Series = Series {
    name: "resil_route_total",
    kind: "counter",
    labels: &["fn", "target", "outcome"],
    meaning: "with `route`: one per attempt sent to a target (`outcome=\"sent\"`) and one per target passed over without a call (`outcome=\"skipped\"`: its breaker open, no rate slot within the deadline, its bulkhead full)",
    query: r#"sum by (fn, target) (rate(resil_route_total{outcome="skipped"}[5m]))"#,
};

/// Hedges, by whether they won their race.
pub const HEDGES: Series = Series {
    name: "resil_hedges_total",
    kind: "counter",
    labels: &["fn", "outcome"],
    meaning: "with `hedge`: one per hedge started, counted when its race ends: `won` when it answered (or committed) first, `lost` when another racer did or every racer failed",
    query: r#"sum by (fn) (rate(resil_hedges_total{outcome="won"}[5m])) / sum by (fn) (rate(resil_hedges_total[5m]))"#,
};

/// What a learning gate learnt of the provider's limit.
pub const RATE_LEARNT: Series = Series {
    name: "resil_rate_learnt",
    kind: "gauge",
    labels: &["fn", "key", "gate"],
    meaning: "with `rate = \"auto\"`, `token_rate = \"auto\"` or `learn = true`: the units per second the gate runs at, as the provider's answers said (`gate=\"rate\"` or `\"token_rate\"`; `key` empty for a gate of all calls), set when it changes by more than a tenth",
    query: r#"min by (fn, key) (resil_rate_learnt{gate="rate"})"#,
};

/// How long calls waited in turn, by class.
pub const WAIT_SECONDS: Series = Series {
    name: "resil_wait_seconds",
    kind: "histogram",
    labels: &["fn", "wait", "class", "promoted"],
    meaning: "with `priority` or `fair`: how long each call that had to wait in turn waited, from joining the waiting room to being served, by what it waited for (`rate`: the rate gate's slot, `token_rate`: the token gate's units, `bulkhead`: a place in the queue; a call may wait for each, one after the other) and by class (`critical`, `default`, `batch`); `promoted=\"true\"` when aging served it before a more urgent waiter. Calls that needed no wait are not in it (`resil_calls_total` counts them)",
    query: r#"histogram_quantile(0.99, sum by (fn, wait, class, le) (rate(resil_wait_seconds_bucket[5m])))"#,
};

/// Calls in flight through a bulkhead all calls share.
pub const BULKHEAD_IN_USE: Series = Series {
    name: "resil_bulkhead_in_use",
    kind: "gauge",
    labels: &["fn"],
    meaning: "operations in flight through a bulkhead all calls share (none per key: a series per key would grow with the key set)",
    query: "max by (fn) (resil_bulkhead_in_use)",
};

/// Where an adaptive bulkhead's limit stands.
pub const CONCURRENCY_LIMIT: Series = Series {
    name: "resil_concurrency_limit",
    kind: "gauge",
    labels: &["fn", "key"],
    meaning: "with `bulkhead = \"adaptive\"`: the limit the bulkhead has learned, set at each change (`key` empty for a bulkhead all calls share; one series per key, bounded by `max_keys`, for one per key)",
    query: "min by (fn, key) (resil_concurrency_limit)",
};

/// Whether a Redis store answers.
pub const SHARED_AVAILABLE: Series = Series {
    name: "resil_shared_available",
    kind: "gauge",
    labels: &["store"],
    meaning: "with feature `redis`: 1 while the Redis store answers, 0 during an outage (while every instance decides locally)",
    query: "min by (store) (resil_shared_available) == 0",
};

/// Every series, in the order the guide lists them.
pub const ALL: &[Series] = &[
    CALLS,
    ATTEMPTS,
    RETRIES,
    OPERATION_SECONDS,
    FIRST_ITEM_SECONDS,
    BREAKER_STATE,
    ROUTE,
    HEDGES,
    RATE_LEARNT,
    WAIT_SECONDS,
    BULKHEAD_IN_USE,
    CONCURRENCY_LIMIT,
    SHARED_AVAILABLE,
];

/// The list of series, as the guide shows it.
pub fn markdown() -> String {
    let mut table = String::from("| series | kind | meaning | query |\n|---|---|---|---|\n");
    for series in ALL {
        table.push_str(&format!(
            "| `{}{{{}}}` | {} | {} | `{}` |\n",
            series.name,
            series.labels.join(", "),
            series.kind,
            series.meaning,
            series.query
        ));
    }
    table
}
