//! [`ProviderLimits`]: what a provider said about its rate limits in one answer, as plain
//! data, whatever headers it came in.

use std::time::Duration;

/// One of a provider's limits as an answer states it: how many units (requests or tokens)
/// are left, and when the limit is whole again.
///
/// ```
/// use resil_runtime::Quota;
/// use std::time::Duration;
///
/// // `x-ratelimit-limit-requests: 10`, `-remaining-requests: 9`, `-reset-requests: 450ms`
/// let quota = Quota { limit: Some(10), remaining: 9, reset: Duration::from_millis(450), window: None };
/// assert!(quota.remaining <= quota.limit.unwrap());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// The units the limit allows per window, when the answer says.
    pub limit: Option<u64>,
    /// The units left now (never above `limit`).
    pub remaining: u64,
    /// How long until the limit is whole again (0: now).
    pub reset: Duration,
    /// The window the limit counts over, when the answer says (the IETF `RateLimit-Policy`'s
    /// `w`).
    pub window: Option<Duration>,
}

/// What one answer said about the provider's limits: on requests, on tokens, either or
/// neither. `http::rate_limits` (feature `http`) reads it from headers, and
/// [`operation::report_limits`](crate::operation::report_limits) hands it to the current call,
/// whose gates declared `rate = "auto"` learn from it.
///
/// ```
/// use resil_runtime::ProviderLimits;
///
/// assert!(ProviderLimits::default().is_empty());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderLimits {
    /// The limit on requests.
    pub requests: Option<Quota>,
    /// The limit on tokens (the most restrictive one the answer states).
    pub tokens: Option<Quota>,
}

impl ProviderLimits {
    /// Whether the answer said nothing about either limit.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }
}
