//! One logical operation: nested `#[resilient]` calls share one deadline and one retry
//! allowance, and see one operation id.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use resil::{resilient, Operation, OperationId, Rejected};
use support::{ApiError, Calls};
use tokio::time::Instant;

#[resilient(retry = 3)]
async fn bottom(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[resilient(retry = 3)]
async fn middle(calls: &Calls) -> Result<u32, ApiError> {
    bottom(calls).await
}

#[resilient(retry = 3)]
async fn top(calls: &Calls) -> Result<u32, ApiError> {
    middle(calls).await
}

#[tokio::test(start_paused = true)]
async fn three_nested_layers_share_one_allowance() {
    let calls = Calls::default();
    assert_eq!(top(&calls).await, Err(ApiError::Busy));
    assert_eq!(
        calls.count(),
        4,
        "one first attempt and the owner's 3 retries, not 4³ = 64"
    );
}

#[resilient(retry = 3, nested = "independent")]
async fn bottom_independent(calls: &Calls) -> Result<u32, ApiError> {
    calls.add();
    Err(ApiError::Busy)
}

#[resilient(retry = 3, nested = "independent")]
async fn middle_independent(calls: &Calls) -> Result<u32, ApiError> {
    bottom_independent(calls).await
}

#[resilient(retry = 3)]
async fn top_of_independent(calls: &Calls) -> Result<u32, ApiError> {
    middle_independent(calls).await
}

#[tokio::test(start_paused = true)]
async fn independent_layers_multiply_as_documented() {
    let calls = Calls::default();
    assert_eq!(top_of_independent(&calls).await, Err(ApiError::Busy));
    assert_eq!(
        calls.count(),
        64,
        "4 × 4 × 4: what `nested = \"independent\"` opts into"
    );
}

#[resilient(timeout = "20s")]
async fn inner(calls: &Calls, remaining: &Mutex<Option<Duration>>) -> Result<(), ApiError> {
    calls.add();
    *remaining.lock().unwrap() = Operation::current().and_then(|operation| operation.remaining());
    std::future::pending().await
}

#[resilient(deadline = "1s")]
async fn outer(calls: &Calls, remaining: &Mutex<Option<Duration>>) -> Result<(), ApiError> {
    inner(calls, remaining).await
}

#[tokio::test(start_paused = true)]
async fn an_inner_timeout_yields_to_the_outer_deadline() {
    let (calls, remaining) = (Calls::default(), Mutex::new(None));
    let started = Instant::now();
    assert_eq!(
        outer(&calls, &remaining).await,
        Err(ApiError::Rejected(Rejected::DeadlineExceeded))
    );
    assert_eq!(started.elapsed(), Duration::from_secs(1), "not 20 s");
    assert_eq!(*remaining.lock().unwrap(), Some(Duration::from_secs(1)));
}

/// No limit of its own: only the enclosing deadline bounds it.
#[resilient(retry = 1)]
async fn unbounded(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    std::future::pending().await
}

#[resilient(deadline = "1s")]
async fn bounding(
    calls: &Calls,
    seen: &Mutex<Option<Result<(), ApiError>>>,
) -> Result<(), ApiError> {
    let result = unbounded(calls).await;
    *seen.lock().unwrap() = Some(result.clone());
    result
}

#[tokio::test(start_paused = true)]
async fn a_nested_call_ends_itself_at_the_enclosing_deadline() {
    let (calls, seen) = (Calls::default(), Mutex::new(None));
    let started = Instant::now();
    let deadline = Err(ApiError::Rejected(Rejected::DeadlineExceeded));
    assert_eq!(bounding(&calls, &seen).await, deadline);
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    assert_eq!(
        *seen.lock().unwrap(),
        Some(deadline),
        "the nested call's first attempt is cut by the deadline it inherits, not only its parent"
    );
    assert_eq!(calls.count(), 1);
}

#[resilient(retry = 2, backoff = "10ms..10ms")]
async fn record_id(ids: &Mutex<Vec<(OperationId, u32)>>) -> Result<(), ApiError> {
    let operation = Operation::current().expect("inside an operation");
    ids.lock()
        .unwrap()
        .push((operation.id(), operation.attempt()));
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn the_operation_id_is_stable_across_attempts_and_unique_per_operation() {
    assert!(Operation::current().is_none());
    let ids = Mutex::new(Vec::new());
    record_id(&ids).await.unwrap_err();
    record_id(&ids).await.unwrap_err();
    let ids = ids.into_inner().unwrap();
    assert_eq!(ids.len(), 6);
    assert!(ids[..3].iter().all(|(id, _)| *id == ids[0].0));
    assert!(ids[3..].iter().all(|(id, _)| *id == ids[3].0));
    assert_ne!(ids[0].0, ids[3].0);
    let attempts: Vec<u32> = ids.iter().map(|(_, attempt)| *attempt).collect();
    assert_eq!(attempts, [0, 1, 2, 0, 1, 2]);
    let key = ids[0].0.to_string();
    assert_eq!(key.len(), 33);
    assert!(key.chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
}

#[resilient(timeout = "5s")]
async fn later_call(calls: &Calls) -> Result<(), ApiError> {
    calls.add();
    Ok(())
}

#[resilient(deadline = "1s")]
async fn spawns(
    calls: Calls,
) -> Result<
    (
        Option<OperationId>,
        Option<OperationId>,
        OperationId,
        Result<(), ApiError>,
    ),
    ApiError,
> {
    let operation = Operation::current().unwrap();
    let plain = tokio::spawn(async { Operation::current().map(|o| o.id()) });
    let carried = tokio::spawn(operation.clone().scope(async move {
        let id = Operation::current().map(|o| o.id());
        tokio::time::sleep(Duration::from_secs(2)).await;
        (id, later_call(&calls).await, calls.count())
    }));
    let plain = plain.await.unwrap();
    let (carried_id, late, late_calls) = carried.await.unwrap();
    assert_eq!(
        late_calls, 0,
        "past the deadline, the nested call made no call"
    );
    Ok((plain, carried_id, operation.id(), late))
}

#[tokio::test(start_paused = true)]
async fn the_context_is_carried_into_spawned_tasks_only_explicitly() {
    let result = spawns(Calls::default()).await;
    // The outer operation itself ran out of time while waiting for the carried task.
    assert_eq!(result, Err(ApiError::Rejected(Rejected::DeadlineExceeded)));

    let operation_id = Mutex::new(None);
    let policy = resil::Policy::builder().build().unwrap();
    let (plain, carried) = policy
        .run(|| async {
            let operation = Operation::current().unwrap();
            *operation_id.lock().unwrap() = Some(operation.id());
            let plain = tokio::spawn(async { Operation::current().map(|o| o.id()) });
            let carried =
                tokio::spawn(operation.scope(async { Operation::current().map(|o| o.id()) }));
            Ok::<_, Rejected>((plain.await.unwrap(), carried.await.unwrap()))
        })
        .await
        .unwrap();
    assert_eq!(plain, None, "tokio::spawn does not inherit the operation");
    assert_eq!(carried, *operation_id.lock().unwrap());
}

#[tokio::test(start_paused = true)]
async fn past_the_deadline_a_carried_nested_call_fails_without_calling() {
    let calls = Calls::default();
    let policy = resil::Policy::builder()
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap();
    let task = policy
        .run(|| async {
            let operation = Operation::current().unwrap();
            let calls = calls.clone();
            Ok::<_, Rejected>(tokio::spawn(operation.scope(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                later_call(&calls).await
            })))
        })
        .await
        .unwrap();
    assert_eq!(
        task.await.unwrap(),
        Err(ApiError::Rejected(Rejected::DeadlineExceeded))
    );
    assert_eq!(calls.count(), 0);
}
