//! Redis answering again: the slots a local gate promised alone while it was down are taken
//! again from it, and those Redis granted stand, whatever ended the session.

use super::*;

/// A gate of 10/s, shared through `store`.
fn ten_a_second(store: &Redis, deadline: Duration) -> Policy {
    Policy::builder()
        .name("two::returns")
        .rate(10, Duration::from_secs(1), 1)
        .deadline(deadline)
        .shared_in(store)
        .build()
        .unwrap()
}

/// A call through `policy` that notes when it started.
async fn noted(policy: &Policy, starts: &Mutex<Vec<Instant>>) -> Result<(), ApiError> {
    policy
        .run(|| async {
            starts.lock().unwrap().push(Instant::now());
            Ok::<_, ApiError>(())
        })
        .await
}

/// A queues 30 calls on its local gate while Redis is down; once both stores are back, B
/// calls through Redis. A's queued slots are taken again from Redis rather than run beside
/// its schedule: from the return on, the calls started by any instant are at most what one
/// schedule of 10/s allows by then. (Late wake-ups on a busy machine only make that looser.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_returns_one_schedule_serves_both_instances() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (store_a, store_b) = (
        Redis::open(&server.url()).await.unwrap(),
        Redis::open(&server.url()).await.unwrap(),
    );
    let deadline = Duration::from_secs(30);
    let (a, b) = (
        ten_a_second(&store_a, deadline),
        ten_a_second(&store_b, deadline),
    );
    server.kill();
    eventually("both see Redis gone", || {
        !store_a.is_available() && !store_b.is_available()
    })
    .await;
    let starts = Mutex::new(Vec::new());
    let queued = futures::future::join_all((0..30).map(|_| noted(&a, &starts)));
    let back = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        server.restart();
        eventually("both are back", || {
            store_a.is_available() && store_b.is_available()
        })
        .await;
        let back = Instant::now();
        let through_b = futures::future::join_all((0..30).map(|_| noted(&b, &starts))).await;
        assert!(through_b.iter().all(Result::is_ok));
        back
    };
    let (through_a, back) = tokio::join!(queued, back);
    assert!(through_a.iter().all(Result::is_ok));
    let mut after: Vec<Instant> = (starts.into_inner().unwrap().into_iter())
        .filter(|at| *at >= back)
        .collect();
    after.sort();
    for (n, at) in after.iter().enumerate() {
        let allowed = 2 + (*at - back).as_millis() / 100;
        assert!(
            (n as u128) < allowed,
            "{} calls started within {:?} of the return; one schedule of 10/s allows {allowed}",
            n + 1,
            *at - back
        );
    }
}

/// The store's session ends while 20 callers wait in Redis's schedule, but Redis loses
/// nothing (its subscription connection is dropped): the slots Redis granted stand, so no
/// caller is moved to the back of the schedule, and all start within their 3 s deadline
/// (the 20th's slot is 1.9 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_that_lost_nothing_keeps_the_slots_redis_granted() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = Redis::open(&server.url()).await.unwrap();
    let policy = ten_a_second(&store, Duration::from_secs(3));
    let starts = Mutex::new(Vec::new());
    let queued = futures::future::join_all((0..20).map(|_| noted(&policy, &starts)));
    let flap = async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let dropped: Option<u64> =
            server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
        assert_eq!(dropped, Some(1), "the store's subscription is dropped");
    };
    let (results, ()) = tokio::join!(queued, flap);
    let failed: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} refused: {:?}",
        failed.len(),
        failed.first()
    );
    assert_eq!(starts.into_inner().unwrap().len(), 20);
}
