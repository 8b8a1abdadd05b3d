//! A fallback serves a call's failures and nothing else.

use resil_runtime::{Outcome, Transient};

use super::{Checker, Inv};
use crate::provider::SimError;

impl Checker {
    /// Call `index`, with a fallback declared, ended `outcome`: the fallback serves it when it
    /// failed (a transient error with no retry left, or a rejection), never a success or a
    /// permanent error; what it serves is counted as the metrics count it.
    pub(crate) fn served(&mut self, index: usize, outcome: &Outcome<u32, SimError>) {
        let logical = self.calls[index].0.logical;
        let (failed, error) = match outcome {
            Outcome::Failed(error) => (true, Some(error)),
            Outcome::Completed(result) => (false, result.as_ref().err()),
        };
        // A rejection is resil's own (a failure) or, from a call nested in the body, the
        // body's error, permanent unless it is transient.
        let holds = match (failed, error) {
            (failed, None) => !failed,
            (true, Some(SimError::Rejected(_))) => true,
            (failed, Some(error)) => failed == error.is_transient(),
        };
        self.check(Inv::Fallback, holds, Some(logical.0), || match failed {
            true => format!("the fallback served {error:?}, which is no failure"),
            false => format!("the fallback did not serve {error:?}, a failure"),
        });
        if failed {
            self.log(format!("c{} falls back after {error:?}", logical.0));
            let told = self.ledger.told.entry((logical.1, "fallbacks".to_owned()));
            *told.or_default() += 1;
        }
    }
}
