//! The `metrics` series a world's policies report, read from a recorder installed on the
//! world's thread alone, in the checker's terms: per policy (0 outer, 1 inner), `calls`,
//! `attempts`, `retries`, `hedges`, `fallbacks` (calls a fallback served), `sent gpt`,
//! `skipped claude`.

use std::collections::BTreeMap;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// A recorder for one world, and what reads it.
pub(crate) struct Meter {
    pub(crate) recorder: DebuggingRecorder,
    snapshotter: Snapshotter,
}

impl Meter {
    pub(crate) fn new() -> Meter {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        Meter {
            recorder,
            snapshotter,
        }
    }

    /// The counters so far.
    pub(crate) fn counted(&self) -> BTreeMap<(u8, String), u64> {
        let mut counted = BTreeMap::new();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let DebugValue::Counter(count) = value else {
                continue;
            };
            let key = key.key();
            let label = |name: &str| {
                key.labels()
                    .find(|label| label.key() == name)
                    .map(|label| label.value().to_owned())
            };
            let which = match label("fn") {
                Some(name) if name.ends_with(".outer") => 0,
                Some(name) if name.ends_with(".inner") => 1,
                _ => continue,
            };
            let what = match key.name() {
                "resil_calls_total" => "calls".to_owned(),
                "resil_attempts_total" => "attempts".to_owned(),
                "resil_retries_total" => "retries".to_owned(),
                "resil_hedges_total" => "hedges".to_owned(),
                "resil_route_total" => format!(
                    "{} {}",
                    label("outcome").unwrap_or_default(),
                    label("target").unwrap_or_default()
                ),
                _ => continue,
            };
            *counted.entry((which, what)).or_default() += count;
            if key.name() == "resil_calls_total" && label("outcome").as_deref() == Some("fallback")
            {
                *counted.entry((which, "fallbacks".to_owned())).or_default() += count;
            }
        }
        counted
    }
}
