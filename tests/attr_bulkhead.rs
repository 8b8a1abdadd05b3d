//! `bulkhead`: a hard cap on operations in flight for the function, all callers together.

mod support;

use std::sync::Arc;
use std::time::Duration;

use resil::{resilient, Rejected};
use support::{ApiError, Calls};

struct Service {
    calls: Calls,
}

impl Service {
    #[resilient(bulkhead = 2)]
    async fn work(&self) -> Result<u32, ApiError> {
        self.calls.add();
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(1)
    }
}

#[tokio::test(start_paused = true)]
async fn the_one_past_the_limit_is_rejected_across_instances() {
    let one = Arc::new(Service {
        calls: Calls::default(),
    });
    let two = Arc::new(Service {
        calls: one.calls.clone(),
    });
    let tasks: Vec<_> = [one.clone(), two.clone(), one.clone(), two.clone()]
        .into_iter()
        .map(|service| tokio::spawn(async move { service.work().await }))
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(results.iter().filter(|r| **r == Ok(1)).count(), 2);
    assert_eq!(
        results
            .iter()
            .filter(|r| **r == Err(ApiError::Rejected(Rejected::BulkheadFull { limit: 2 })))
            .count(),
        2,
        "state is per function, shared by every instance"
    );
    assert_eq!(one.calls.count(), 2);
    assert_eq!(one.work().await, Ok(1), "permits came back");
}
