//! The reference of `#[resilient]` keys: what each means, its default, what it accepts and
//! the builder method that does the same. The macro lists [`KEYS`]' summaries when a key is
//! not recognised; the guide's reference table is [`markdown`], checked by a test against the
//! copy the guide includes, so the two cannot drift.
//!
//! ```
//! use resil_spec::keys;
//!
//! let retry = keys::find("retry").unwrap();
//! assert_eq!(retry.default, "0");
//! assert!(keys::markdown().contains("| `retry = 2` |"));
//! ```

/// One key of the attribute, as the reference shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key, as written in the attribute.
    pub name: &'static str,
    /// An example of the key as written.
    pub example: &'static str,
    /// What it means, in a few words: what the macro lists for a key it does not know.
    pub summary: &'static str,
    /// What it does, in full.
    pub meaning: &'static str,
    /// Its value when not written (`none`: the policy does without it).
    pub default: &'static str,
    /// What the macro refuses, besides a value of the wrong form.
    pub constraints: &'static str,
    /// The `PolicyBuilder` method that does the same by hand.
    pub builder: &'static str,
}

/// Every key, in the order the reference presents them.
pub const KEYS: &[KeyDoc] = &[
    KeyDoc {
        name: "profile",
        example: r#"profile = "llm""#,
        summary: "a preset the other keys override: fast, database, external_api, llm, payment or idempotent",
        meaning: "start from a preset, then the keys written beside it: `fast` (3 s, 1 retry), `database` (5 s, 2 retries), `external_api` (10 s, 2 retries 1 s..8 s, breaker 5 / 30 s), `llm` (60 s, 2 retries 2 s..30 s, Retry-After up to 60 s, breaker 3 / 60 s), `payment` (10 s, 1 retry, no jitter, breaker 3 / 120 s), `idempotent` (5 retries 500 ms..30 s)",
        default: "none",
        constraints: "one of the six names",
        builder: "`profile(profiles::named(\"llm\").unwrap())`",
    },
    KeyDoc {
        name: "timeout",
        example: r#"timeout = "20s""#,
        summary: "limit for one attempt",
        meaning: "limit for one attempt; past it the attempt fails with `Rejected::Timeout` (transient)",
        default: "none",
        constraints: "above zero, at most `deadline`; not on a stream (`first_item_timeout`)",
        builder: "`timeout(Duration)`",
    },
    KeyDoc {
        name: "deadline",
        example: r#"deadline = "45s""#,
        summary: "limit for the whole operation, waits included",
        meaning: "limit for the whole operation, every attempt and wait; no wait starts that cannot end before it",
        default: "none",
        constraints: "above zero; the shortest waits of every retry end before it",
        builder: "`deadline(Duration)`",
    },
    KeyDoc {
        name: "first_item_timeout",
        example: r#"first_item_timeout = "20s""#,
        summary: "a stream's limit to its first item, connect included",
        meaning: "streams: limit for one attempt up to the stream's first item, connect included",
        default: "none",
        constraints: "above zero; streaming functions only",
        builder: "`timeout(Duration)`, on a policy run with `run_stream`",
    },
    KeyDoc {
        name: "idle_timeout",
        example: r#"idle_timeout = "30s""#,
        summary: "a stream's longest gap between items",
        meaning: "streams: longest gap between items after the first; past it the stream yields `Rejected::Idle` and ends",
        default: "none",
        constraints: "above zero; streaming functions only",
        builder: "`idle_timeout(Duration)`",
    },
    KeyDoc {
        name: "complete_when",
        example: "complete_when = Chunk::is_final",
        summary: "a stream's test for its final item",
        meaning: "streams: `fn(&T) -> bool` naming the final item; a stream that ends before it yields `Rejected::Incomplete`",
        default: "none",
        constraints: "a path to a function; streaming functions only",
        builder: "`ResilientStream::complete_when(fn)`",
    },
    KeyDoc {
        name: "commit_when",
        example: "commit_when = Chunk::has_content",
        summary: "a stream's test for the item that commits it, such as its first content",
        meaning: "streams: `fn(&T) -> bool` naming the item that commits the stream; the items before it are held, and a stall, error or end before it is retried; the final item commits too",
        default: "the first item",
        constraints: "a path to a function; streaming functions only",
        builder: "`run_stream_until(Commit::when(fn), …)`",
    },
    KeyDoc {
        name: "commit_hold",
        example: "commit_hold = 500",
        summary: "the most items a stream holds before the one that commits it",
        meaning: "streams with `commit_when`: the most items held before the committing one; one more ends the attempt with `Rejected::Uncommitted` (transient), so a provider that never commits cannot fill memory",
        default: "10000",
        constraints: "needs `commit_when`; streaming functions only",
        builder: "`commit_hold(usize)`",
    },
    KeyDoc {
        name: "retry",
        example: "retry = 2",
        summary: "extra attempts after the first, for transient errors only",
        meaning: "extra attempts after the first, only when the error `is_transient()`",
        default: "0",
        constraints: "a whole number",
        builder: "`retry(u32)`",
    },
    KeyDoc {
        name: "retry_after_max",
        example: r#"retry_after_max = "60s""#,
        summary: "the longest Retry-After honoured",
        meaning: "the longest `Retry-After` honoured: an error asking for more (or for more than the deadline has left) ends the operation at once, keeping its `retry_after()` for the caller",
        default: "60s",
        constraints: "above zero",
        builder: "`retry_after_max(Duration)`",
    },
    KeyDoc {
        name: "backoff",
        example: r#"backoff = "300ms..8s""#,
        summary: "the exponential envelope of the waits",
        meaning: "wait before retry n = random(0, min(cap, base·2ⁿ)); with a `Retry-After`, the Retry-After plus that draw",
        default: "300ms..8s",
        constraints: "base above zero and at most cap",
        builder: "`backoff(base, cap)`",
    },
    KeyDoc {
        name: "jitter",
        example: r#"jitter = "full""#,
        summary: "how a wait is drawn from the envelope",
        meaning: "how a wait is drawn from the envelope: `full`, `equal`, `decorrelated` or `none`",
        default: "full",
        constraints: "one of the four names",
        builder: "`jitter(Jitter)`",
    },
    KeyDoc {
        name: "transient",
        example: "transient = classify",
        summary: "a function that says which errors are worth retrying, instead of the error type's `Transient`",
        meaning: "a function `fn(&E) -> bool` (true: worth retrying) or `fn(&E) -> resil::Classification` (also throttle, a wait, move on) that decides for the function's error type `E`, which then need not implement `Transient`: for an error type of another crate. The runtime's own failures (a timeout, an open breaker), converted into `E` through `From<Rejected>`, keep the runtime's classification",
        default: "the error type's `Transient`",
        constraints: "a path to a function of that type; `E` still implements `From<resil::Rejected>`, or `rejected` is given; not on a streaming function",
        builder: "`transient(fn)`",
    },
    KeyDoc {
        name: "rejected",
        example: "rejected = to_status",
        summary: "a function that makes the error type from resil's own failures, instead of `From<Rejected>`",
        meaning: "a function `fn(resil::Rejected) -> E` by which a timeout, an open breaker or a full bulkhead reaches the caller as the function's error type `E`, for a type of another crate, for which the orphan rule forbids `From<Rejected>`; those failures keep resil's classification",
        default: "`E`'s `From<Rejected>`",
        constraints: "a path to a function of that type; needs `transient`",
        builder: "`rejected(fn)` after `transient(fn)`",
    },
    KeyDoc {
        name: "key",
        example: "key = (provider, req.model)",
        summary: "an expression over the arguments that per-key breakers, bulkheads and gates are keyed by",
        meaning: "the key of what is declared per key: an expression over the arguments (`self` included), or a tuple of 2 to 4; evaluated once per call, borrowed; a reference to a key (`self.name()`, `req.model()` returning `&str`) keys by the value it points to",
        default: "none",
        constraints: "its type is `Hash + Eq + Display`; needs something per key",
        builder: "`keyed(label)`, then `run_keyed(&key, …)`",
    },
    KeyDoc {
        name: "breaker",
        example: r#"breaker = "per_model""#,
        summary: "a named breaker, one per key, or one per value of an argument",
        meaning: "`\"openai\"`: the process-wide breaker of that name; `\"per_key\"`: one per value of `key`; `\"per_model\"`: one per value of the argument `model`",
        default: "none",
        constraints: "`per_<arg>` names an argument; `per_key` needs `key`",
        builder: "`breaker_named(name, threshold, cooldown)`, `breaker_per_key(…)`, `breaker(Arc<Breaker>)`",
    },
    KeyDoc {
        name: "breaker_threshold",
        example: "breaker_threshold = 5",
        summary: "consecutive transient failures that open it",
        meaning: "consecutive transient failures that open the breaker (throttles do not count)",
        default: "5",
        constraints: "at least 1; needs `breaker`",
        builder: "`breaker_named(name, threshold, cooldown)`",
    },
    KeyDoc {
        name: "breaker_cooldown",
        example: r#"breaker_cooldown = "30s""#,
        summary: "time open before one probe",
        meaning: "time open before one probe is let through",
        default: "30s",
        constraints: "above zero; needs `breaker`",
        builder: "`breaker_named(name, threshold, cooldown)`",
    },
    KeyDoc {
        name: "breaker_kind",
        example: r#"breaker_kind = "failure_rate""#,
        summary: "how the breaker judges: consecutive, failure_rate or slow_call",
        meaning: "`consecutive` failures, the share of transient failures among the last calls (`failure_rate`), or the share of calls slower than `breaker_slow` (`slow_call`)",
        default: "consecutive",
        constraints: "one of the three names; `slow_call` needs `breaker_slow`",
        builder: "`breaker_kind(BreakerKind)`",
    },
    KeyDoc {
        name: "breaker_rate",
        example: r#"breaker_rate = "25%""#,
        summary: "the share of failed (or slow) calls that opens a failure_rate (or slow_call) breaker",
        meaning: "with `failure_rate` or `slow_call`: the share that opens the breaker",
        default: "50%",
        constraints: "1% to 100%",
        builder: "`breaker_kind(BreakerKind::FailureRate { … })`",
    },
    KeyDoc {
        name: "breaker_window",
        example: "breaker_window = 20",
        summary: "the calls a failure_rate or slow_call breaker remembers: a count or a time",
        meaning: "with `failure_rate` or `slow_call`: the last calls remembered (`20`), or the calls of the last so long (`\"30s\"`, in buckets of about a second: a quiet night forgets the evening's failures); with `shared = true`, a time, summed over every instance",
        default: "20",
        constraints: "1 to 10 000 calls, at least `breaker_min_calls`; or a time from 1s to 24h, in which a declared `rate` lets `breaker_min_calls` through",
        builder: "`breaker_kind(BreakerKind::FailureRate { window: WindowSize::Time(…), … })`",
    },
    KeyDoc {
        name: "breaker_min_calls",
        example: "breaker_min_calls = 10",
        summary: "the calls counted before a failure_rate or slow_call breaker may open",
        meaning: "with `failure_rate` or `slow_call`: the calls counted before it may open",
        default: "10",
        constraints: "at least 1, at most a `breaker_window` of calls, or what a declared `rate` lets through in a time window",
        builder: "`breaker_kind(BreakerKind::FailureRate { … })`",
    },
    KeyDoc {
        name: "breaker_slow",
        example: r#"breaker_slow = "2s""#,
        summary: "what a slow_call breaker counts as slow",
        meaning: "with `slow_call`: a call this long or longer (a timeout included) counts as slow",
        default: "none",
        constraints: "above zero",
        builder: "`breaker_kind(BreakerKind::SlowCall { … })`",
    },
    KeyDoc {
        name: "max_keys",
        example: "max_keys = 10000",
        summary: "keys kept at most",
        meaning: "with a key: keys kept at most (their breakers, bulkheads and gates); idle and long-stale ones are forgotten first, ones in use never. With `fair`: the values that take turns at once; past it, newcomers share one more turn, the overflow's",
        default: "10000",
        constraints: "at least 1",
        builder: "`max_keys(usize)`",
    },
    KeyDoc {
        name: "bulkhead",
        example: "bulkhead = 8",
        summary: "operations in flight at most, in all or per key",
        meaning: "at most 8 operations in flight; the 9th fails at once with `Rejected::BulkheadFull`; `\"8 per key\"`: 8 per value of the key; `\"adaptive\"` (1 to 256, from 16) or `\"adaptive 4..64\"` (bounds included): a limit that adapts to the provider, halved on a throttle, an attempt timeout or a transient failure (once per burst), one more after as many successes as the limit, a tenth less when a round of 16 answers takes twice its usual time (its median, against a light-load baseline for each cost)",
        default: "none",
        constraints: "at least 1; adaptive bounds at least 1, the least first; `per key` needs `key`",
        builder: "`bulkhead(usize)`, `bulkhead_adaptive(min, max)`, `bulkhead_per_key()`",
    },
    KeyDoc {
        name: "bulkhead_queue",
        example: "bulkhead_queue = 16",
        summary: "callers that may wait for a place in the bulkhead",
        meaning: "with `bulkhead`: up to 16 more callers wait for a place, in order, within their deadline; the next is rejected at once",
        default: "none",
        constraints: "needs `bulkhead`",
        builder: "`bulkhead_queue(usize)`",
    },
    KeyDoc {
        name: "rate",
        example: r#"rate = "60/min""#,
        summary: "attempts per period, retries included",
        meaning: "at most 60 attempts a minute, evenly spaced (`/s`, `/min`, `/h`); `\", burst N\"` lets N start at once; an attempt waits for its slot if the wait fits its deadline, else fails at once with `Rejected::RateLimited`; one that comes to its slot more than 100 ms late (its future left unpolled), or after waiting for a half-open breaker's probe, takes a new one; a 429 holds the gate for its wait and slows it for at most a minute, unless `\", exact\"` says the limit is the provider's exactly; `\" per key\"`: a gate per value of the key; `\"auto\"` declares no figure and learns the provider's from its answers (one call until the first answer says the limit, then what is left at once, and the limit per window from the reset); `\", batch 80%\"`: while calls of other classes came within the period, calls of class `Batch` take at most that share of the gate, so the rest is free for the others when they come, and all of it when none did",
        default: "none",
        constraints: "count and burst at least 1; `per key` needs `key`; `batch N%` needs `priority`, from 1 to 99 %",
        builder: "`rate(count, period, burst)`, `rate_exact()`, `rate_learn()`, `rate_per_key()`, `rate_batch_share(percent)`",
    },
    KeyDoc {
        name: "token_rate",
        example: r#"token_rate = "90000/min""#,
        summary: "units of cost (tokens) per period",
        meaning: "at most 90 000 units of cost a minute, each attempt costing `rate_cost`; a cost above the burst fails at once with `Rejected::OverBurst`; `\", batch 80%\"`: while calls of other classes came within the period, calls of class `Batch` take at most that share of the tokens (one larger than the share's burst waits the longer for it), and all of them when none did",
        default: "none",
        constraints: "as `rate` (`\"auto\"` too); needs `rate_cost`; `batch N%` needs `priority` and a token gate of all calls that neither learns nor is shared",
        builder: "`token_rate(count, period, burst)`, `token_rate_exact()`, `token_rate_learn()`, `token_rate_per_key()`, `token_rate_batch_share(percent)`",
    },
    KeyDoc {
        name: "rate_cost",
        example: "rate_cost = req.max_tokens",
        summary: "what one attempt costs the token gate",
        meaning: "with `token_rate`: what one attempt costs, an expression over the arguments evaluated per attempt",
        default: "none",
        constraints: "needs `token_rate`",
        builder: "`Execution::set_cost(u64)`",
    },
    KeyDoc {
        name: "priority",
        example: "priority = class",
        summary: "the argument (a `resil::Priority`) that orders the callers waiting for a slot or a place",
        meaning: "callers that must wait for the rate gate's next slot, the token gate's next units or the bulkhead queue's next place are served by this argument's class: `Critical`, then `Default`, then `Batch`, first come first served within a class; a slot goes to the most urgent waiter when it comes due; a class passed over `Priority::AGING_PASSES` times is served next (aging). Calls that need no wait are not ordered",
        default: "none: waiters are served in arrival order",
        constraints: "names an argument whose type is `Priority` (or `Copy + Into<Priority>`); needs `rate`, `token_rate` or `bulkhead_queue`; not with a shared gate that learns and asks the store in turn (the rate gate, or the token gate with no rate gate)",
        builder: "`by_priority()`, then `Execution::set_priority(Priority)` per call",
    },
    KeyDoc {
        name: "fair",
        example: "fair = tenant",
        summary: "the argument whose values take turns at the gates and the bulkhead queue",
        meaning: "callers of one class that must wait for the rate gate's next slot, the token gate's next units or the bulkhead queue's next place are served round-robin across this argument's values, in arrival order within a value: a tenant that sends 100 calls and one that sends 5 alternate (at the token gate, turns by tokens: the value served the fewest tokens goes next). A value is held only while one of its calls waits, as a hash; past `max_keys` values waiting at once, newcomers share one more turn, the overflow's",
        default: "none: waiters of a class are served in arrival order",
        constraints: "names an argument whose type is `Hash`; needs `rate`, `token_rate` or `bulkhead_queue`; not with a shared gate that learns and asks the store in turn (the rate gate, or the token gate with no rate gate)",
        builder: "`fair()`, then `Execution::set_fair_key(&value)` per call",
    },
    KeyDoc {
        name: "learn",
        example: "learn = true",
        summary: "the rate gates follow the limits the provider's answers state",
        meaning: "the declared `rate` and `token_rate` follow what the provider's answers say of its limits (OpenAI's `x-ratelimit-*`, Anthropic's `anthropic-ratelimit-*`, the IETF `RateLimit` fields, read by `http::classify`): what is left until the reset is spread over the time left, and nothing left holds the gate until the reset; never faster than declared",
        default: "false",
        constraints: "needs `rate` or `token_rate`",
        builder: "`rate_learn()`, `token_rate_learn()`",
    },
    KeyDoc {
        name: "route",
        example: r#"route = model in ["claude-sonnet", "gpt-4o-mini"]"#,
        summary: "other values of an argument to send attempts to: models, providers, regions",
        meaning: "each attempt goes to a target: the caller's value of the argument, then the listed values in order (or any expression whose items convert to the argument's type, evaluated once per call); a target whose breaker is open, whose gate has no slot within the deadline or whose bulkhead is full is skipped without a call; a transient failure moves to the next target at once, coming back to one that failed waits the backoff; an error whose `moves_on()` is true (`#[transient(route)]`) moves on and never goes back; the body sees the argument bound to the attempt's target. One deadline, one retry allowance, one operation id. With `retry = 0` or no state per key of that argument, a route only skips, or only moves on",
        default: "none",
        constraints: "names an argument other than `self`; state per key, if any, keyed by that argument",
        builder: "`Policy::run_routed(first, others, ..)`, `run_stream_routed`, `route`",
    },
    KeyDoc {
        name: "hedge",
        example: r#"hedge = "1 after 800ms""#,
        summary: "more attempts racing a slow one: how many, and after how long",
        meaning: "when an attempt has neither answered nor (for a stream) committed within 800 ms, one more starts beside it, up to the count; the first to succeed (or commit) wins and the others are dropped, their permits, slots and probe places given back, counted nowhere; a racer that fails while others run is a failure of its target, and the race goes on. Hedges are attempts: they draw from `retry`, the operation's allowance and the retry budget, which may refuse them. With `route`, each hedge goes to the next target that would call (the same one when none would). The racers run inside the caller's task and share the operation id and idempotency key",
        default: "none",
        constraints: "1 to 3 hedges; the delay shorter than `timeout` (or `first_item_timeout`); needs `retry`; not with a body that needs `&mut self` or a `&mut` argument",
        builder: "`hedge(count, delay)`, `Execution::race`",
    },
    KeyDoc {
        name: "fallback",
        example: "fallback = Self::cached",
        summary: "an async fn with the same arguments",
        meaning: "an async fn with the same arguments, called for transient errors and rejections",
        default: "none",
        constraints: "a path to an async fn",
        builder: "match on the result of `run`",
    },
    KeyDoc {
        name: "listener",
        example: "listener = AUDIT",
        summary: "a static that hears this function's events",
        meaning: "a `static` implementing `resil::events::Listener` that hears this function's events, besides the global listeners",
        default: "none",
        constraints: "a path to a `static`",
        builder: "`listener(Arc<dyn Listener>)`",
    },
    KeyDoc {
        name: "retry_budget",
        example: r#"retry_budget = "20%""#,
        summary: "retries as a share of first attempts",
        meaning: "retries may add at most 20 % to first attempts, over a sliding 10 s window; `\"20%, min 10/s\"` sets a floor",
        default: "none",
        constraints: "a share and a floor that are not negative",
        builder: "`retry_budget(ratio, min_per_sec)`",
    },
    KeyDoc {
        name: "nested",
        example: r#"nested = "independent""#,
        summary: "keep this call's own retries inside another operation",
        meaning: "inside another operation, `independent` keeps this call's own retry count; `shared` draws on the enclosing call's",
        default: "shared",
        constraints: "`shared` or `independent`",
        builder: "`independent(bool)`",
    },
    KeyDoc {
        name: "shared",
        example: "shared = true",
        summary: "keep the breaker and rate gates in Redis, shared by every instance",
        meaning: "feature `redis`: the breaker and rate gates live in Redis, shared by every instance",
        default: "false",
        constraints: "feature `redis`; needs a breaker or a rate gate",
        builder: "`shared()`, `shared_in(&Redis)`",
    },
    KeyDoc {
        name: "shared_timeout",
        example: r#"shared_timeout = "50ms""#,
        summary: "how long a call waits for Redis before deciding locally",
        meaning: "with `shared`: how long a call waits for Redis before its local state decides",
        default: "50ms",
        constraints: "above zero, at most 1 s; needs `shared`",
        builder: "`shared_timeout(Duration)`",
    },
    KeyDoc {
        name: "shared_fail",
        example: r#"shared_fail = "closed""#,
        summary: "when Redis does not answer: open (decide locally) or closed (refuse)",
        meaning: "with `shared`: while Redis does not answer, `closed` refuses (`Rejected::SharedUnavailable`) where `open` decides locally",
        default: "open",
        constraints: "`open` or `closed`; needs `shared`",
        builder: "`shared_fail_closed(bool)`",
    },
];

/// The key named `name`.
pub fn find(name: &str) -> Option<&'static KeyDoc> {
    KEYS.iter().find(|key| key.name == name)
}

/// The reference table, as the guide shows it.
pub fn markdown() -> String {
    let mut table =
        String::from("| key | meaning | default | accepts | by hand |\n|---|---|---|---|---|\n");
    for key in KEYS {
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            key.example, key.meaning, key.default, key.constraints, key.builder
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{defaults, duration, Jitter};

    #[test]
    fn every_key_is_documented_once_and_written_as_its_example_shows() {
        for (i, key) in KEYS.iter().enumerate() {
            assert!(
                KEYS[..i].iter().all(|other| other.name != key.name),
                "{}",
                key.name
            );
            assert!(
                key.example.starts_with(&format!("{} = ", key.name)),
                "{}",
                key.name
            );
            for text in [
                key.summary,
                key.meaning,
                key.default,
                key.constraints,
                key.builder,
            ] {
                assert!(
                    !text.is_empty() && !text.contains('|'),
                    "{}: {text}",
                    key.name
                );
            }
        }
    }

    #[test]
    fn the_defaults_shown_are_the_defaults_used() {
        let shown = |name| find(name).unwrap().default;
        let range = duration::parse_range(shown("backoff")).unwrap();
        assert_eq!(range, (defaults::BACKOFF_BASE, defaults::BACKOFF_CAP));
        assert_eq!(Jitter::from_name(shown("jitter")), Some(Jitter::Full));
        let durations = [
            ("retry_after_max", defaults::RETRY_AFTER_MAX),
            ("breaker_cooldown", defaults::BREAKER_COOLDOWN),
            ("shared_timeout", defaults::SHARED_TIMEOUT),
        ];
        for (name, default) in durations {
            assert_eq!(duration::parse(shown(name)), Ok(default), "{name}");
        }
        let counts = [
            ("breaker_threshold", defaults::BREAKER_THRESHOLD),
            ("breaker_window", defaults::BREAKER_WINDOW),
            ("breaker_min_calls", defaults::BREAKER_MIN_CALLS),
            ("max_keys", defaults::MAX_KEYS as u32),
        ];
        for (name, default) in counts {
            assert_eq!(shown(name), default.to_string(), "{name}");
        }
        assert_eq!(
            shown("breaker_rate"),
            format!("{}%", defaults::BREAKER_RATE)
        );
    }
}
