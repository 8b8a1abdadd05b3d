use resil::{Policy, Rejected};
use std::time::Duration;

async fn call(policy: &Policy<resil::Keyed>) -> Result<u32, Rejected> {
    // A policy with one breaker per key has no `run`: without the key it would have no breaker.
    policy.run(|| async { Ok(1) }).await
}

fn main() {
    let policy = Policy::builder()
        .breaker_per_key("model", 5, Duration::from_secs(30))
        .build()
        .unwrap();
    let _ = call(&policy);
}
