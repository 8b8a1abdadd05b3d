//! `fair = ARG` on annotated functions: callers of one class that must wait for the rate
//! gate's slot or the bulkhead queue's place are served in turn across the argument's
//! values, so a tenant with a few calls is not queued behind another's flood.

mod support;

use std::time::Duration;

use futures::future::join_all;
use resil::{resilient, Priority};
use support::ApiError;
use tokio::time::sleep;

type Starts = support::Starts<String>;

#[resilient(rate = "10/s", fair = tenant)]
async fn fair_gate(tenant: &str, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    Ok(())
}

#[resilient(rate = "10/s")]
async fn unfair_gate(tenant: &str, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    Ok(())
}

const MS: fn(u64) -> Duration = Duration::from_millis;

#[tokio::test(start_paused = true)]
async fn a_light_tenants_calls_alternate_with_a_heavy_tenants_flood() {
    let starts = Starts::new();
    let heavy = join_all((0..100).map(|_| fair_gate("heavy", &starts)));
    let light = join_all((0..5).map(|_| fair_gate("light", &starts)));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    // The heavy tenant's first call took the free slot; then the two take turns.
    assert_eq!(
        starts.of(&"light".into()),
        [MS(200), MS(400), MS(600), MS(800), MS(1000)]
    );
    let heavy = starts.of(&"heavy".into());
    assert_eq!(&heavy[..4], [MS(0), MS(100), MS(300), MS(500)]);
    // Nobody lost more than the slots taken from it: 105 calls, 104 intervals.
    assert_eq!(heavy.last(), Some(&MS(10_400)));
    starts.keep_rate(10, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn without_fair_the_light_tenant_waits_behind_the_flood() {
    let starts = Starts::new();
    let heavy = join_all((0..100).map(|_| unfair_gate("heavy", &starts)));
    let light = join_all((0..5).map(|_| unfair_gate("light", &starts)));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    assert_eq!(starts.of(&"light".into())[0], MS(10_000));
}

#[resilient(rate = "10/s", priority = class, fair = tenant)]
async fn fair_by_class(tenant: &str, class: Priority, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    let _ = class;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn turns_are_taken_within_a_class_and_classes_keep_their_order() {
    let starts = Starts::new();
    let batch = join_all((0..20).map(|_| fair_by_class("batch", Priority::Batch, &starts)));
    let a = join_all((0..6).map(|_| fair_by_class("a", Priority::Default, &starts)));
    let b = join_all((0..2).map(|_| fair_by_class("b", Priority::Default, &starts)));
    let (batch, a, b) = tokio::join!(batch, a, b);
    assert!(batch.iter().chain(&a).chain(&b).all(Result::is_ok));
    // The first batch call took the free slot; the default class goes next, a and b in turn.
    assert_eq!(
        starts.of(&"a".into()),
        [MS(100), MS(300), MS(500), MS(600), MS(700), MS(800)]
    );
    assert_eq!(starts.of(&"b".into()), [MS(200), MS(400)]);
    assert_eq!(starts.of(&"batch".into())[..2], [MS(0), MS(900)]);
    starts.keep_rate(10, Duration::from_secs(1));
}

#[resilient(bulkhead = 1, bulkhead_queue = 20, fair = tenant)]
async fn fair_queue(tenant: &str, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    sleep(Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_bulkheads_freed_places_go_to_the_tenants_in_turn() {
    let starts = Starts::new();
    let heavy = join_all((0..8).map(|_| fair_queue("heavy", &starts)));
    let light = join_all((0..2).map(|_| fair_queue("light", &starts)));
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(heavy.iter().chain(&light).all(Result::is_ok));
    let s = Duration::from_secs;
    assert_eq!(starts.of(&"light".into()), [s(2), s(4)]);
    assert_eq!(starts.of(&"heavy".into())[..4], [s(0), s(1), s(3), s(5)]);
}

#[resilient(rate = "10/s", timeout = "1s", deadline = "1s", fair = tenant)]
async fn fair_with_a_deadline(tenant: &str, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_counts_only_the_turns_before_its_own_against_its_deadline() {
    let starts = Starts::new();
    // 30 calls of one tenant: the slots until 1 s go to the first 10, the rest are refused at
    // once; a second tenant's call is served at the next turn, within its deadline.
    let heavy = join_all((0..30).map(|_| fair_with_a_deadline("heavy", &starts)));
    let light = fair_with_a_deadline("light", &starts);
    let (heavy, light) = tokio::join!(heavy, light);
    assert!(light.is_ok(), "{light:?}");
    assert_eq!(starts.of(&"light".into()), [MS(200)]);
    assert!(heavy.iter().filter(|r| r.is_err()).count() >= 19);
}

#[resilient(rate = "10/s", fair = tenant, max_keys = 1)]
async fn one_turn(tenant: &str, starts: &Starts) -> Result<(), ApiError> {
    starts.add(tenant.to_owned());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn past_max_keys_values_waiting_newcomers_share_the_overflow_lanes_turn() {
    let starts = Starts::new();
    let heavy = join_all((0..20).map(|_| one_turn("heavy", &starts)));
    let light = one_turn("light", &starts);
    let late = one_turn("late", &starts);
    let (heavy, light, late) = tokio::join!(heavy, light, late);
    assert!(heavy.iter().all(Result::is_ok) && light.is_ok() && late.is_ok());
    // One lane for the heavy tenant (max_keys = 1), the overflow lane for the two others.
    assert_eq!(starts.of(&"light".into()), [MS(200)]);
    assert_eq!(starts.of(&"late".into()), [MS(400)]);
}
