//! The builder's rate and token gates: their figures, and whether they learn or are exact.

use std::time::Duration;

use super::PolicyBuilder;

impl<K, C> PolicyBuilder<K, C> {
    /// `count` attempts per `period`, `burst` of them at once (see [`RateGate`](crate::RateGate)): in any
    /// window of `period` at most `count + burst - 1` start, so burst 1 is "never more than
    /// `count`", as the attribute's `rate = "60/min"` means by default. An attempt waits for its slot when the wait fits in the deadline, and is refused at once
    /// with [`crate::Rejected::RateLimited`] otherwise. Retries take slots too. A slot is good
    /// for its moment: an attempt that comes to it more than 100 ms late (its future left
    /// unpolled, as a coalesced call whose first caller left), or after waiting for a half-open
    /// breaker's probe, takes a new one, so the bound holds for the calls' starts.
    pub fn rate(mut self, count: u64, period: Duration, burst: u64) -> Self {
        self.rate = Some((count, period, burst));
        self
    }

    /// At most `count` units of cost (tokens) per `period`, `burst` at once; each attempt
    /// takes what [`crate::Execution::set_cost`] says it costs (1 unless told).
    pub fn token_rate(mut self, count: u64, period: Duration, burst: u64) -> Self {
        self.token_rate = Some((count, period, burst));
        self
    }

    /// The rate gate's limit is the provider's exactly (`rate = "10/s, exact"`): a 429 holds
    /// it for the wait it asks, and does not slow it down (see [`crate::RateGate::exact`]).
    pub fn rate_exact(mut self) -> Self {
        self.exact.rate = true;
        self
    }

    /// The token gate's limit is the provider's exactly (see [`PolicyBuilder::rate_exact`]).
    pub fn token_rate_exact(mut self) -> Self {
        self.exact.token_rate = true;
        self
    }

    /// A rate gate that learns the provider's limit from its answers (`rate = "auto"`): with
    /// a [`rate`](PolicyBuilder::rate) declared, it starts there and never runs faster
    /// (`learn = true`); without, it starts knowing nothing and probes (see
    /// [`RateGate::auto`](crate::RateGate::auto)). The answers reach it through
    /// [`crate::http::classify`] (or [`crate::operation::report_limits`]) in the call's body.
    ///
    /// ```
    /// use resil_runtime::Policy;
    ///
    /// let policy = Policy::builder().name("llm").rate_learn().build().unwrap();
    /// assert!(policy.rate_gate().unwrap().learns());
    /// ```
    pub fn rate_learn(mut self) -> Self {
        self.learn.rate = true;
        self
    }

    /// The token gate learns the provider's limit on tokens from its answers
    /// (`token_rate = "auto"`; see [`PolicyBuilder::rate_learn`]).
    pub fn token_rate_learn(mut self) -> Self {
        self.learn.token_rate = true;
        self
    }

    /// While calls of other classes come (within the gate's period), batch calls
    /// ([`Priority::Batch`](crate::Priority::Batch)) take at most `percent` (1 to 99) of the
    /// rate gate's capacity: the rest is free for the others, who then start at once rather
    /// than wait for a slot behind a full schedule; when none came for a period, batch calls
    /// take all of it (`rate = "500/min, batch 80%"`). A batch call waits for its place in the
    /// share before it takes its slot in the gate, so no slot is held idle meanwhile. Implies
    /// [`by_priority`](PolicyBuilder::by_priority). Per instance, for a shared gate.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resil_runtime::{Next, Policy, Priority, Rejected};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let policy = Policy::builder()
    ///     .rate(500, Duration::from_secs(60), 1)
    ///     .rate_batch_share(80)
    ///     .build()
    ///     .unwrap();
    /// let mut execution = policy.execute::<Rejected>();
    /// execution.set_priority(Priority::Batch);
    /// let Next::Done(outcome) = execution.attempt(async { Ok(5) }).await else {
    ///     unreachable!("no retry declared")
    /// };
    /// assert_eq!(outcome.into_result(), Ok(5));
    /// assert!(Policy::builder().rate_batch_share(80).build().is_err());
    /// # }
    /// ```
    pub fn rate_batch_share(mut self, percent: u8) -> Self {
        self.by_priority = true;
        self.batch_share.rate = Some(percent);
        self
    }

    /// [`PolicyBuilder::rate_batch_share`] for the token gate (`token_rate = "40000/min,
    /// batch 80%"`): while calls of other classes come, batch calls take at most `percent` of
    /// its tokens (at most its whole burst at once), the rest kept free for the others. A batch
    /// call held back waits for its place in the share in the token gate's waiting room, and
    /// for its units after it. For a token gate of all calls that neither learns nor is
    /// shared. Implies [`by_priority`](PolicyBuilder::by_priority).
    ///
    /// ```
    /// use std::time::Duration;
    /// use resil_runtime::Policy;
    ///
    /// let policy = Policy::builder()
    ///     .token_rate(40_000, Duration::from_secs(60), 40_000)
    ///     .token_rate_batch_share(80)
    ///     .build();
    /// assert!(policy.is_ok());
    /// assert!(Policy::builder().token_rate_batch_share(80).build().is_err());
    /// ```
    pub fn token_rate_batch_share(mut self, percent: u8) -> Self {
        self.by_priority = true;
        self.batch_share.token_rate = Some(percent);
        self
    }
}
