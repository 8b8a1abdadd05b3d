//! A learning gate kept in a shared store (real Redis).

use super::*;
use resil::{operation, ProviderLimits, Quota};

/// A shared `token_rate = "auto"` gate lets a call of many tokens through: its burst is the
/// limit the provider states, not the 1 of the placeholder rate (the shared path once
/// compared the cost with that 1 and refused every call of more than one token).
#[tokio::test]
async fn a_shared_auto_token_gate_lets_a_call_of_many_tokens_through() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let learning = |p: resil::PolicyBuilder| patient_learn(p).token_rate_learn();
    let a = instance(&server, learning).await;
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let mut execution = a.policy.execute::<ApiError>();
        execution.set_cost(100);
        let tokens = Quota {
            limit: Some(100_000),
            remaining: 90_000,
            reset: Duration::from_secs(60),
            window: None,
        };
        let next = execution
            .attempt(async move {
                operation::report_limits(ProviderLimits {
                    requests: None,
                    tokens: Some(tokens),
                });
                Ok::<(), ApiError>(())
            })
            .await;
        let resil::execution::Next::Done(outcome) = next else {
            panic!("no retry declared");
        };
        outcomes.push(outcome.into_result());
    }
    assert!(
        outcomes.iter().all(Result::is_ok),
        "a call of 100 tokens against a stated 100 000: {outcomes:?}"
    );
}

fn patient_learn(p: resil::PolicyBuilder) -> resil::PolicyBuilder {
    p.shared_timeout(Duration::from_secs(1))
}
