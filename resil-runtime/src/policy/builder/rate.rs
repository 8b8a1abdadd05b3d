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
}
