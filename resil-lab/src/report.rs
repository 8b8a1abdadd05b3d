//! Tallies of a load run: latencies, provider calls, outcomes by kind.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::LlmError;

/// What one row of a scenario measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The row's name (`"a"`, `"b"`, ...).
    pub row: &'static str,
    /// What the row runs.
    pub label: &'static str,
    /// From the first request to the last answer.
    pub total: Duration,
    /// Median user wait.
    pub p50: Duration,
    /// 95th percentile user wait.
    pub p95: Duration,
    /// Calls that reached the provider.
    pub calls: u32,
    /// Outcome kind → count.
    pub outcomes: BTreeMap<&'static str, u32>,
}

impl Row {
    /// Builds a row from per-request `(wait, result)` pairs.
    pub fn new<T>(
        row: &'static str,
        label: &'static str,
        total: Duration,
        calls: u32,
        requests: &[(Duration, Result<T, LlmError>)],
    ) -> Self {
        let mut waits: Vec<Duration> = requests.iter().map(|(wait, _)| *wait).collect();
        waits.sort();
        let mut outcomes = BTreeMap::new();
        for (_, result) in requests {
            let kind = result.as_ref().map_or_else(LlmError::kind, |_| "ok");
            *outcomes.entry(kind).or_insert(0) += 1;
        }
        Row {
            row,
            label,
            total,
            p50: percentile(&waits, 50),
            p95: percentile(&waits, 95),
            calls,
            outcomes,
        }
    }

    /// How many requests ended as `kind`.
    pub fn count(&self, kind: &str) -> u32 {
        self.outcomes.get(kind).copied().unwrap_or(0)
    }

    /// One JSON object.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "row": self.row,
            "total_ms": self.total.as_millis() as u64,
            "p50_ms": self.p50.as_millis() as u64,
            "p95_ms": self.p95.as_millis() as u64,
            "calls": self.calls,
            "outcomes": self.outcomes,
        })
    }

    /// The outcomes as `ok 4, bulkhead_full 96`.
    pub fn outcome_text(&self) -> String {
        self.outcomes
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}
