//! Breakers and keyed state, shared: an opening reaches the other instance, one probe goes
//! out for all, each key has its own state, and keys that print alike never share it.

use super::*;

#[tokio::test]
async fn an_opening_and_a_closing_reach_the_other_instance() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        instance(&server, |p| p).await,
        instance(&server, |p| p).await,
    );
    let (calls_a, calls_b) = (Calls::default(), Calls::default());

    for _ in 0..2 {
        assert!(call(&a.policy, &calls_a, Err(ApiError::Busy))
            .await
            .is_err());
    }
    assert_eq!(a.breaker.state(), BreakerState::Open);
    eventually("b opens", || b.breaker.state() == BreakerState::Open).await;
    assert!(is_breaker_open(&call(&b.policy, &calls_b, Ok(())).await));
    assert_eq!(calls_b.count(), 0, "b rejects without calling");

    cooldown_over(&server).await;
    assert_eq!(call(&a.policy, &calls_a, Ok(())).await, Ok(()), "a's probe");
    eventually("b closes", || b.breaker.state() == BreakerState::Closed).await;
    assert_eq!(call(&b.policy, &calls_b, Ok(())).await, Ok(()));
    assert_eq!(
        server.keys("resil:"),
        Vec::<String>::new(),
        "closing leaves nothing"
    );
}

#[tokio::test]
async fn one_probe_across_instances() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        instance(&server, |p| p).await,
        instance(&server, |p| p).await,
    );
    let calls = Calls::default();
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("b opens", || b.breaker.state() == BreakerState::Open).await;
    cooldown_over(&server).await;

    let probes = Calls::default();
    let slow = |policy: &'static Policy| {
        let probes = probes.clone();
        async move {
            policy
                .run(|| {
                    let probes = probes.clone();
                    async move {
                        probes.add();
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        Ok::<(), ApiError>(())
                    }
                })
                .await
        }
    };
    let (a_policy, b_policy): (&'static Policy, &'static Policy) =
        (Box::leak(Box::new(a.policy)), Box::leak(Box::new(b.policy)));
    let (from_a, from_b) = tokio::join!(slow(a_policy), slow(b_policy));
    assert_eq!(probes.count(), 1, "one probe in all: {from_a:?} {from_b:?}");
    assert_eq!(
        [&from_a, &from_b]
            .iter()
            .filter(|r| is_breaker_open(r))
            .count(),
        1,
        "the other instance rejects: {from_a:?} {from_b:?}"
    );
    eventually("both close", || {
        a.breaker.state() == BreakerState::Closed && b.breaker.state() == BreakerState::Closed
    })
    .await;
}

#[tokio::test]
async fn keyed_state_is_shared_per_key() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("llm::complete")
            .keyed("model")
            .breaker_per_key("model", 2, COOLDOWN)
            .rate(5, Duration::from_secs(60), 5)
            .rate_per_key()
            .deadline(Duration::from_secs(1))
            .shared_in(&store)
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    for model in ["gpt", "claude"] {
        assert_eq!(
            b.run_keyed(model, || async { Ok::<(), ApiError>(()) })
                .await,
            Ok(())
        );
    }
    for _ in 0..2 {
        let _ = a
            .run_keyed("gpt", || async { Err::<(), ApiError>(ApiError::Busy) })
            .await;
    }
    let state = |model: &str| b.keys().unwrap().get(model).breaker().unwrap().state();
    eventually("b's gpt opens", || state("gpt") == BreakerState::Open).await;
    assert_eq!(state("claude"), BreakerState::Closed);

    // The gate is per key across instances: a and b share gpt's 5, claude keeps its own.
    let mut passed = 0;
    for i in 0..8 {
        let policy = if i % 2 == 0 { &a } else { &b };
        if policy
            .run_keyed("claude", || async { Ok::<(), ApiError>(()) })
            .await
            .is_ok()
        {
            passed += 1;
        }
    }
    assert_eq!(
        passed, 4,
        "5 a minute for claude, one of them spent by b above"
    );
    let mut keys = server.keys("resil:");
    keys.sort();
    assert!(
        keys.contains(&"resil:{breaker:llm::complete:model=gpt}:open".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"resil:{gate:llm::complete:model=claude}:rate".to_owned()),
        "{keys:?}"
    );
}

/// A tenant whose key prints like another's (`("openai, gpt-4o", "mini")` and
/// `("openai", "gpt-4o, mini")`, or a megabyte that starts like another megabyte) opens its
/// own breaker on every instance, never the other's.
#[tokio::test]
async fn keys_that_print_alike_never_share_redis_state() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("llm::hostile")
            .breaker_per_key("(provider, model)", 1, Duration::from_secs(60))
            .shared_in(&store)
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    let mega = "m".repeat(1 << 20);
    let mega_too = format!("{mega}n");
    let victims = [("openai", "gpt-4o, mini"), (mega_too.as_str(), "x")];
    let attackers = [("openai, gpt-4o", "mini"), (mega.as_str(), "x")];
    for (provider, model) in victims.iter().chain(&attackers) {
        let key = KeyTuple((*provider, *model));
        assert_eq!(
            b.run_keyed(&key, || async { Ok::<(), ApiError>(()) }).await,
            Ok(())
        );
    }
    for (provider, model) in attackers {
        let _ = a
            .run_keyed(&KeyTuple((provider, model)), || async {
                Err::<(), ApiError>(ApiError::Busy)
            })
            .await;
    }
    let state = |(provider, model): (&str, &str)| {
        let scope = b.keys().unwrap().get(&KeyTuple((provider, model)));
        scope.breaker().unwrap().state()
    };
    eventually("b hears of both attackers' openings", || {
        attackers
            .iter()
            .all(|key| state(*key) == BreakerState::Open)
    })
    .await;
    for victim in victims {
        assert_eq!(state(victim), BreakerState::Closed, "{:.40}", victim.0);
    }
    let opened = server.keys("resil:{breaker:llm::hostile");
    assert_eq!(opened.len(), 2, "one opening per attacker: {opened:.200?}");
    assert!(opened.iter().all(|key| key.len() < 400), "{opened:.200?}");
}

/// A tenant named by its region: two tenants of one region print alike.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
struct Tenant {
    id: u64,
    region: &'static str,
}

impl std::fmt::Display for Tenant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.region)
    }
}

/// Unequal keys that print alike keep a breaker each in one instance, and share one name in
/// Redis (as documented: a shared key is its name): an opening published under that name
/// reaches every breaker of the name in the other instance, not the last one it listed.
#[tokio::test]
async fn keys_that_print_alike_share_their_name_in_redis_and_all_hear_it() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let keyed = || async {
        let store = Redis::open(&server.url()).await.unwrap();
        let policy = Policy::builder()
            .name("two::tenants")
            .breaker_per_key("tenant", 1, Duration::from_secs(60))
            .shared_in(&store)
            .build()
            .unwrap();
        (store, policy)
    };
    let ((_a_store, a), (_b_store, b)) = (keyed().await, keyed().await);
    let (first, second) = (
        Tenant {
            id: 1,
            region: "eu",
        },
        Tenant {
            id: 2,
            region: "eu",
        },
    );
    for tenant in [&first, &second] {
        assert_eq!(
            b.run_keyed(tenant, || async { Ok::<(), ApiError>(()) })
                .await,
            Ok(())
        );
    }
    let failed = a
        .run_keyed(&first, || async { Err::<(), ApiError>(ApiError::Busy) })
        .await;
    assert_eq!(failed, Err(ApiError::Busy));
    let state = |tenant: &Tenant| b.keys().unwrap().get(tenant).breaker().unwrap().state();
    eventually(
        "both of B's breakers named tenant=eu hear the opening",
        || state(&first) == BreakerState::Open && state(&second) == BreakerState::Open,
    )
    .await;
}

#[tokio::test]
async fn keys_expire_once_cooldowns_and_windows_pass() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // Six calls at 4/s: the gate's key outlives the last of them by about a second, time
    // enough on a busy machine to see it beside the opening.
    let shape = |p: resil::PolicyBuilder| p.rate(4, Duration::from_secs(1), 4);
    let a = instance(&server, shape).await;
    let calls = Calls::default();
    for _ in 0..4 {
        let _ = call(&a.policy, &calls, Ok(())).await;
    }
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("the opening is in Redis", || {
        server.keys("resil:{breaker:").len() == 1
    })
    .await;
    assert_eq!(gate_keys(&server, "resil:{gate:").len(), 1);
    eventually("nothing is left in Redis", || {
        server.keys("resil:").is_empty()
    })
    .await;
}
