//! Stores a team might write, buggy or hostile, handed to resil through the public trait
//! (`store`), and against the windows summed across instances and each instance's share of a
//! shared gate (`across`): whatever a store answers, a call never hangs nor waits past its
//! deadline, a breaker still judges and a gate still keeps a rate.
#![cfg(feature = "shared")]

#[path = "../common/counting.rs"]
#[cfg(feature = "conformance")]
mod counting;

mod across;
#[cfg(feature = "conformance")]
mod store;

use resil_runtime::{Policy, Rejected, Transient};

#[derive(Debug)]
enum Failure {
    Down,
    Rejected(Rejected),
}

impl Transient for Failure {
    fn is_transient(&self) -> bool {
        matches!(self, Failure::Down)
    }
}

impl From<Rejected> for Failure {
    fn from(rejected: Rejected) -> Self {
        Failure::Rejected(rejected)
    }
}

async fn call(policy: &Policy, ok: bool) -> Result<(), Failure> {
    policy
        .run(|| async move {
            match ok {
                true => Ok(()),
                false => Err(Failure::Down),
            }
        })
        .await
}
