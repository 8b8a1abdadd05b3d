//! The worst-case latency of a policy, by the function `#[resilient]` uses for its docs.

use std::time::Duration;

use resil::Backoff;

/// One policy's worst case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The policy, as written.
    pub policy: &'static str,
    /// The longest a caller can wait.
    pub worst: Duration,
    /// What the original computed.
    pub original: &'static str,
}

impl Case {
    /// One JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "policy": self.policy,
            "worst_ms": self.worst.as_millis() as u64,
            "original": self.original,
        })
    }
}

/// The original's settings: 20 s timeout, retry 2, backoff from 300 ms; the same with a
/// fallback model behind the same policy; and 8 s with one retry. The original counted no
/// server-requested waits (`Duration::ZERO`); the last row is the first policy when the
/// provider answers `Retry-After: 60` each time, which resil honours up to `retry_after_max`.
pub fn cases() -> Vec<Case> {
    let backoff = Backoff::default();
    let secs = Duration::from_secs;
    let quiet = Duration::ZERO;
    let one = resil::worst_case(Some(secs(20)), None, 2, &backoff, quiet)
        .expect("bounded by the timeout");
    let short =
        resil::worst_case(Some(secs(8)), None, 1, &backoff, quiet).expect("bounded by the timeout");
    let asked = resil::worst_case(Some(secs(20)), None, 2, &backoff, secs(60))
        .expect("bounded by the timeout");
    vec![
        Case {
            policy: "timeout 20s, retry 2, backoff 300ms..8s",
            worst: one,
            original: "60.9 s",
        },
        Case {
            policy: "the same, then a fallback model with the same policy",
            worst: one * 2,
            original: "121.8 s",
        },
        Case {
            policy: "timeout 8s, retry 1",
            worst: short,
            original: "16.3 s",
        },
        Case {
            policy: "timeout 20s, retry 2, server sends Retry-After: 60",
            worst: asked,
            original: "not counted",
        },
    ]
}
