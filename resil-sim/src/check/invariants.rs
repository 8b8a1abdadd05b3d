//! The invariants, each named with the sentence of the guide it comes from.

/// One invariant: its name and where the promise is written.
#[derive(Debug)]
pub(crate) struct Invariant {
    pub(crate) name: &'static str,
    pub(crate) guide: &'static str,
}

/// Indexes into [`INVARIANTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Inv {
    NothingHeld,
    GateCeiling,
    SharedCeiling,
    OutageShare,
    RetryAfter,
    Attempts,
    Allowance,
    MovedOn,
    Deadline,
    NoHang,
    DroppedAtOnce,
    WorstCase,
    IdempotencyKey,
    AttemptNumber,
    OpenLetsNoneThrough,
    Transitions,
    Recovers,
    EventsAgree,
    SkippedNoCall,
    ThrottleNoFailure,
    Budget,
    MetricsAgree,
    StreamOneAttempt,
    StreamEnds,
    OwnPanics,
    Tuning,
    KeyedBytes,
    InTurn,
    Fallback,
}

pub(crate) const INVARIANTS: [Invariant; 29] = [
    Invariant {
        name: "nothing_held_at_quiescence",
        guide: "design.md: \"a listener that panics cannot leave a permit or a probe slot held\"; route_and_hedge.md: \"their permits, rate slots and probe places go back\"",
    },
    Invariant {
        name: "gate_ceiling_per_instance",
        guide: "PolicyBuilder::rate: \"in any window of `period` at most `count + burst - 1` start\"; learning_limits.md: \"never past a declared ceiling\"",
    },
    Invariant {
        name: "gate_ceiling_across_instances",
        guide: "many_instances.md: shared gates keep one limit for every instance while the store answers",
    },
    Invariant {
        name: "gate_share_during_outage",
        guide: "many_instances.md: \"each instance's local gate runs at the declared rate divided by the instances it last saw ... together they keep about the declared rate\"",
    },
    Invariant {
        name: "retry_after_kept_per_target",
        guide: "route_and_hedge.md: \"back to a target that failed | the backoff and its Retry-After apply, as for a retry\"; keys.md retry_after_max: \"the longest `Retry-After` honoured\"",
    },
    Invariant {
        name: "attempts_within_retry",
        guide: "route_and_hedge.md: \"one retry allowance (`retry = 2`: three calls in all, on any targets)\"; hedges are \"each drawn from the retries\"",
    },
    Invariant {
        name: "nested_calls_draw_from_their_root",
        guide: "first_steps.md: a nested call \"draws its retries from the allowance of the nearest enclosing call that declares retries\"",
    },
    Invariant {
        name: "moved_on_target_never_called_again",
        guide: "route_and_hedge.md: a move-on error is \"moved on from at once, never sent to that target again in this operation\"",
    },
    Invariant {
        name: "attempts_within_deadline",
        guide: "keys.md deadline: \"limit for the whole operation, every attempt and wait; no wait starts that cannot end before it\"",
    },
    Invariant {
        name: "every_call_ends_by_its_deadline",
        guide: "design.md: \"Whatever a server or a caller says, the runtime neither panics nor hangs\"; keys.md deadline: \"limit for the whole operation\"",
    },
    Invariant {
        name: "a_cancelled_body_is_dropped_by_its_deadline",
        guide: "lib.rs: \"each attempt ... runs under the attempt's timeout and what is left of the deadline\"; route_and_hedge.md: \"the others are dropped at once\"",
    },
    Invariant {
        name: "worst_case_holds",
        guide: "Policy::worst_case: \"The longest one operation can take\"",
    },
    Invariant {
        name: "one_idempotency_key_per_operation",
        guide: "Operation::id: \"stable across its attempts; use it as an `Idempotency-Key`\"; operation.rs: \"Two different charges inside one operation get different idempotency keys\"",
    },
    Invariant {
        name: "operation_attempt_is_the_calls_own",
        guide: "Operation::attempt: \"0 on the first attempt; grows by one with every retry made anywhere in the operation\"; design.md: nothing an operation decides leaks into another",
    },
    Invariant {
        name: "an_open_breaker_lets_no_call_through",
        guide: "BreakerState::Open: \"Calls fail at once with Rejected::BreakerOpen\"; operation.rs: a nested call on a breaker an enclosing call holds \"goes through as part of that call\"",
    },
    Invariant {
        name: "breaker_transitions_legal",
        guide: "choosing_keys.md: \"After `breaker_cooldown` (30 s) one probe is let through; its success closes the breaker, its failure opens it for another cooldown\"",
    },
    Invariant {
        name: "recovers_after_quiet",
        guide: "learning_limits.md: \"never stall it for longer than `retry_after_max`\"; choosing_keys.md: \"After `breaker_cooldown` one probe is let through\"",
    },
    Invariant {
        name: "events_tell_every_attempt",
        guide: "Event::AttemptStarted: \"An attempt is about to call\"; Event::AttemptEnded: \"An attempt ended\", its outcome what the call returned; Event::Routed: \"The next attempt goes to `target`\"",
    },
    Invariant {
        name: "a_skipped_target_gets_no_call",
        guide: "Event::Skipped: \"A route passed over `target` without calling it\"; route_and_hedge.md: a target whose breaker is open \"is skipped\"",
    },
    Invariant {
        name: "a_throttle_never_counts_as_a_failure",
        guide: "Transient: \"a transient error is the only kind that counts toward opening a circuit breaker ... A throttle ... never counts toward opening a breaker\"",
    },
    Invariant {
        name: "retries_within_the_process_budget",
        guide: "RetryBudget: \"Over a sliding 10-second window, retries may add at most `ratio` to the first attempts (plus `min_per_sec` retries per second)\"; hedges are drawn from it too",
    },
    Invariant {
        name: "metrics_agree_with_events",
        guide: "series.rs: resil_attempts_total \"one per attempt started\", resil_retries_total \"one per retry decided\", resil_route_total \"one per attempt sent ... one per target passed over\", resil_calls_total \"one per operation ... a cancelled operation counts nothing\"",
    },
    Invariant {
        name: "a_stream_is_one_attempts_items",
        guide: "stream.rs: \"The operation returns `Ok(stream)` only once the first item is in hand\", the items held before the commit \"handed over in order\"; route_and_hedge.md: a stream hedge's losers are dropped",
    },
    Invariant {
        name: "a_stream_ends_as_promised",
        guide: "stream.rs: the stream \"ends with one `Err(Rejected::Idle { after })` when no item arrives within the policy's `idle_timeout`\", \"ends at the item that complete_when recognises as the final one\", \"ends with one `Err(Rejected::Incomplete)` when the body's stream ends before\" it",
    },
    Invariant {
        name: "no_panic_escapes_but_the_bodys_own",
        guide: "design.md: \"Whatever a server or a caller says, the runtime neither panics nor hangs\"; attempt/mod.rs: \"a listener that panics cannot leave a probe slot or a permit held\" (its panic, like the body's, is the caller's)",
    },
    Invariant {
        name: "a_tuning_applies_whole_or_not_at_all",
        guide: "Policy::set_tuning: \"Makes `tuning` the one new operations start with; operations in flight finish under the one they started with. Refused ... if it breaks a rule (the policy then keeps its tuning)\"",
    },
    Invariant {
        name: "keyed_state_within_its_bytes",
        guide: "rates_and_keys.md: \"At most `max_keys` keys are kept ... A key costs at most `Keys::MAX_BYTES_PER_KEY` (2.5 KiB) however long it is ... 3 KiB (`Keys::MAX_BYTES_PER_SHARED_KEY`) for a policy shared\"",
    },
    Invariant {
        name: "waiters_served_in_turn",
        guide: "priority.md: the callers that must wait \"are served most urgent first, in arrival order within a class\"; with `fair`, \"in arrival order within a value\"; across instances \"a critical call waits for the slots booked by the instances' next callers (one each, its own instance's included)\"",
    },
    Invariant {
        name: "a_fallback_serves_only_failures",
        guide: "keys.md: `fallback = Self::cached`: \"an async fn with the same arguments, called for transient errors and rejections\"",
    },
];
