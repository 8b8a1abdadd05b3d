//! Configuration changed at run time: a tuning set applies whole or, refused, not at all.
//! That each operation keeps the tuning it started with, the other invariants check: each
//! call's retries, deadline and Retry-After cap are read as it begins.

use resil_runtime::{ConfigError, Tuning};

use super::{Checker, Inv};

impl Checker {
    /// Whether the call's policy was switched on when it started.
    pub(crate) fn enabled(&self, index: usize) -> bool {
        self.calls[index].0.enabled
    }

    /// `tuning` was set on the policy `scope` (instance, 0 outer or 1 inner), which had
    /// `before` and now has `after`.
    pub(crate) fn retuned(
        &mut self,
        (instance, which): (usize, u8),
        before: &Tuning,
        tuning: &Tuning,
        refused: Option<ConfigError>,
        after: &Tuning,
    ) {
        let policy = if which == 0 { "outer" } else { "inner" };
        let holds = match &refused {
            Some(error) => {
                self.log(format!("i{instance} {policy}: tuning refused: {error}"));
                after == before
            }
            None => {
                self.log(format!(
                    "i{instance} {policy} tuned: {}retry {}, timeout {:?}, deadline {:?}, idle {:?}, retry_after_max {:?}",
                    if tuning.enabled { "" } else { "off, " },
                    tuning.retry,
                    tuning.timeout,
                    tuning.deadline,
                    tuning.idle,
                    tuning.retry_after_max
                ));
                // Switched off, it runs with no limit and no retry.
                after == tuning || (!tuning.enabled && !after.enabled && after.retry == 0)
            }
        };
        self.check(Inv::Tuning, holds, None, || {
            format!(
                "set {tuning:?} (refused: {refused:?}) on {before:?}: the policy now has {after:?}"
            )
        });
    }
}
