//! Shared state in a real Redis Cluster of three masters on loopback: two instances share
//! breakers and gates whose keys live on different nodes; when one node dies, the keys it
//! held decide locally and the others keep sharing.

use resil_lab::redis_cluster::RedisCluster;

use super::*;

/// A name, found by trying `prefix0`, `prefix1`…, whose key (made by `key`) lives on `node`.
pub(super) fn name_on(
    cluster: &RedisCluster,
    node: usize,
    prefix: &str,
    key: impl Fn(&str) -> String,
) -> String {
    // A node holding no slot (a master demoted by a failover) would have none.
    (0..1000)
        .map(|i| format!("{prefix}{i}"))
        .find(|name| cluster.node_of(&key(name)) == node)
        .unwrap_or_else(|| panic!("no key of the cluster's node {node}: it holds no slot"))
}

pub(super) fn breaker_key(name: &str) -> String {
    format!("resil:{{breaker:{name}}}:open")
}

pub(super) fn gate_key(name: &str) -> String {
    format!("resil:{{gate:{name}}}:rate")
}

/// An instance whose breaker is `name`, through `store`.
pub(super) fn breaker_in(store: &Redis, name: &str) -> Instance {
    breaker_cooling(store, name, COOLDOWN)
}

/// [`breaker_in`], open for `cooldown` once opened.
fn breaker_cooling(store: &Redis, name: &str, cooldown: Duration) -> Instance {
    let breaker = Arc::new(Breaker::new(name, BreakerConfig::new(2, cooldown).unwrap()));
    let policy = Policy::builder()
        .name("cluster::breaker")
        .breaker(Arc::clone(&breaker))
        .shared_in(store)
        .shared_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    Instance {
        store: store.clone(),
        breaker,
        policy,
    }
}

/// A policy of the function `name` with a shared gate of one call a minute.
pub(super) fn gate_in(store: &Redis, name: &str) -> Policy {
    Policy::builder()
        .name(name)
        .rate(1, Duration::from_secs(60), 1)
        .deadline(Duration::from_secs(1))
        .shared_in(store)
        .shared_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// Whether `b` shares `a`'s one slot a minute: a's call passes, b's is refused.
pub(super) async fn one_between(a: &Policy, b: &Policy) -> bool {
    let calls = Calls::default();
    let first = call(a, &calls, Ok(())).await;
    let second = call(b, &calls, Ok(())).await;
    first.is_ok()
        && matches!(
            second,
            Err(ApiError::Rejected(Rejected::RateLimited { .. }))
        )
}

/// Opens `a`'s breaker by two failures; true once `b`'s follows.
pub(super) async fn opening_reaches(a: &Instance, b: &Instance) -> bool {
    let calls = Calls::default();
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    settled(|| b.breaker.state() == BreakerState::Open).await
}

#[tokio::test]
async fn a_cluster_shares_across_nodes_and_a_dead_node_fails_open_alone() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let urls = cluster.urls();
    let heard = NodeEvents::heard(&cluster);
    let a = Redis::cluster(&urls).open().await.unwrap();
    let b = Redis::cluster(&urls).open().await.unwrap();
    assert!(a.is_available() && b.is_available());

    // Node 0 dies later; node 1 and 2 stay. Each store subscribes on the first node listed,
    // node 0, then on node 1 once node 0 is gone: news published on another node crosses.
    let doomed = name_on(&cluster, 0, "doomed", breaker_key);
    let kept = name_on(&cluster, 2, "kept", breaker_key);
    assert_ne!(
        cluster.node_of(&breaker_key(&doomed)),
        cluster.node_of(&breaker_key(&kept))
    );
    let (doomed_a, doomed_b) = (breaker_in(&a, &doomed), breaker_in(&b, &doomed));
    let (kept_a, kept_b) = (breaker_in(&a, &kept), breaker_in(&b, &kept));
    assert!(
        opening_reaches(&doomed_a, &doomed_b).await,
        "node 0's breaker is shared"
    );
    assert_eq!(cluster.keys(0, &breaker_key(&doomed)).len(), 1, "on node 0");
    let across = name_on(&cluster, 1, "across", breaker_key);
    let (across_a, across_b) = (breaker_in(&a, &across), breaker_in(&b, &across));
    assert!(
        opening_reaches(&across_a, &across_b).await,
        "published on node 1, heard on node 0"
    );
    let gate_doomed = name_on(&cluster, 0, "gate::doomed", gate_key);
    let gate_kept = name_on(&cluster, 1, "gate::kept", gate_key);
    assert!(
        one_between(&gate_in(&a, &gate_doomed), &gate_in(&b, &gate_doomed)).await,
        "node 0's gate is shared"
    );
    assert!(
        one_between(&gate_in(&a, &gate_kept), &gate_in(&b, &gate_kept)).await,
        "node 1's gate is shared"
    );
    assert_eq!(
        cluster.keys(1, &gate_key(&gate_kept)).len(),
        2,
        "the gate and its instances, both on node 1"
    );

    cluster.kill(0);

    // Node 0's keys decide locally: a fresh gate there lets each instance call.
    let gate_dead = name_on(&cluster, 0, "gate::dead", gate_key);
    let (dead_a, dead_b) = (gate_in(&a, &gate_dead), gate_in(&b, &gate_dead));
    let calls = Calls::default();
    assert_eq!(call(&dead_a, &calls, Ok(())).await, Ok(()));
    assert_eq!(
        call(&dead_b, &calls, Ok(())).await,
        Ok(()),
        "each instance decides alone on a dead node's keys"
    );
    let node = node_label(&cluster, 0);
    assert!(
        settled(|| heard.count(&node) >= 1).await,
        "the dead node is said: {:?}",
        heard.said
    );
    // The other nodes keep sharing: a breaker opened on a reaches b (its news published on
    // node 2, heard on node 1, where b subscribes once node 0 took its subscription down),
    // and a fresh gate on node 1 still holds one call for both.
    assert!(
        a.is_available() && b.is_available(),
        "one node is not the store"
    );
    assert!(
        opening_reaches(&kept_a, &kept_b).await,
        "node 2's breaker is still shared"
    );
    let gate_live = name_on(&cluster, 1, "gate::live", gate_key);
    assert!(
        one_between(&gate_in(&a, &gate_live), &gate_in(&b, &gate_live)).await,
        "node 1's gate still holds the shared rate"
    );
    // Scripts not run before the node died (the probe's, the closing's) run on the live
    // nodes: the cooldown over, a's probe closes both breakers.
    tokio::time::sleep(COOLDOWN).await;
    assert!(
        settled(|| cluster.keys(2, &breaker_key(&kept)).is_empty()).await,
        "the opening expires"
    );
    assert_eq!(
        call(&kept_a.policy, &calls, Ok(())).await,
        Ok(()),
        "a's probe"
    );
    assert!(
        settled(|| kept_b.breaker.state() == BreakerState::Closed).await,
        "the closing reaches b"
    );
    assert!(
        heard.said.lock().unwrap().iter().all(|said| *said == node),
        "only node 0 was out: {:?}",
        heard.said
    );
    let dead_again = gate_in(&b, &gate_dead);
    assert_eq!(
        call(&dead_again, &calls, Ok(())).await,
        Ok(()),
        "still local"
    );
    assert_eq!(heard.count(&node), 2, "said once by each store");
    assert!(
        (a.last_error()).is_some_and(|reason| reason.contains(&cluster.port(0).to_string())),
        "{:?}",
        a.last_error()
    );
}

/// How a store of `cluster` names `node` in its events: the cluster's label (its nodes'
/// URLs), then the node's address.
fn node_label(cluster: &RedisCluster, node: usize) -> String {
    let port = cluster.port(node);
    format!("{} node 127.0.0.1:{port}", cluster.urls().join(","))
}

/// The outages and returns the global listener heard from one cluster's stores, by store
/// label.
#[derive(Debug)]
struct NodeEvents {
    cluster: String,
    said: Mutex<Vec<String>>,
    restored: Mutex<Vec<String>>,
}

impl NodeEvents {
    /// Listens to the stores of `cluster` (by the store label of its urls): other tests'
    /// clusters stop while this one runs.
    fn heard(cluster: &RedisCluster) -> Arc<Self> {
        let heard = Arc::new(Self {
            cluster: cluster.urls().join(","),
            said: Mutex::default(),
            restored: Mutex::default(),
        });
        events::add_global_listener(Arc::clone(&heard) as Arc<dyn Listener>);
        heard
    }

    /// How many outages of `store` were said.
    fn count(&self, store: &str) -> usize {
        times(&self.said, store)
    }

    /// How many returns of `store` were said.
    fn restored(&self, store: &str) -> usize {
        times(&self.restored, store)
    }
}

fn times(heard: &Mutex<Vec<String>>, store: &str) -> usize {
    let heard = heard.lock().unwrap();
    heard.iter().filter(|heard| *heard == store).count()
}

impl Listener for NodeEvents {
    fn on_event(&self, event: &Event<'_>) {
        match event {
            Event::SharedUnavailable { store, .. } if store.starts_with(&self.cluster) => {
                self.said.lock().unwrap().push((*store).to_owned())
            }
            Event::SharedRestored { store } if store.starts_with(&self.cluster) => {
                self.restored.lock().unwrap().push((*store).to_owned())
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn gates_of_one_call_in_two_slots_reserve_together() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    // The rate gate per user, the token gate per function: their keys have two hash tags.
    let keyed = |store: Redis| {
        Policy::builder()
            .name("cluster::mixed")
            .keyed("user")
            .rate(1, Duration::from_secs(60), 1)
            .rate_per_key()
            .token_rate(1000, Duration::from_secs(60), 1000)
            .deadline(Duration::from_secs(1))
            .shared_in(&store)
            .shared_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let a = keyed(Redis::cluster(cluster.urls()).open().await.unwrap());
    let b = keyed(Redis::cluster(cluster.urls()).open().await.unwrap());
    let ok = || async { Ok::<(), ApiError>(()) };
    assert_eq!(a.run_keyed("u1", ok).await, Ok(()));
    assert!(
        matches!(
            b.run_keyed("u1", ok).await,
            Err(ApiError::Rejected(Rejected::RateLimited { .. }))
        ),
        "u1's gate is shared (no CROSSSLOT, no fail-open)"
    );
    assert_eq!(b.run_keyed("u2", ok).await, Ok(()));
    let tokens = "resil:{gate:cluster::mixed}:tokens";
    let node = cluster.node_of(tokens);
    let spent: Option<String> = cluster.query(node, redis::cmd("HGET").arg(tokens).arg("tat"));
    assert!(
        spent.is_some(),
        "the token gate was reserved in its own slot"
    );
}

#[cfg(feature = "conformance")]
#[tokio::test]
async fn a_redis_cluster_conforms() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let urls = cluster.urls();
    resil::shared::conformance::run(|| async { Redis::cluster(&urls).open().await.unwrap() }).await;
}

#[tokio::test]
async fn a_late_node_is_skipped_alone_and_the_store_stays_available() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let heard = NodeEvents::heard(&cluster);
    let a = Redis::cluster(cluster.urls()).open().await.unwrap();
    let b = Redis::cluster(cluster.urls()).open().await.unwrap();
    let hasty = |store: &Redis, name: &str| {
        Policy::builder()
            .name(name)
            .rate(1, Duration::from_secs(60), 1)
            .deadline(Duration::from_secs(1))
            .shared_in(store)
            .shared_timeout(Duration::from_millis(100))
            .build()
            .unwrap()
    };
    // Node 2 stalls (it holds no subscription: the stores listen on node 0).
    let stalled = name_on(&cluster, 2, "gate::stalled", gate_key);
    let live = name_on(&cluster, 1, "gate::answering", gate_key);
    cluster.pause(2);
    let calls = Calls::default();
    let answered = call(&hasty(&a, &stalled), &calls, Ok(())).await;
    cluster.resume(2);
    assert_eq!(answered, Ok(()), "the late node's gate decides locally");
    let node = node_label(&cluster, 2);
    assert!(
        settled(|| heard.count(&node) >= 1).await,
        "the late node is said: {:?}",
        heard.said
    );
    assert!(
        a.is_available(),
        "resil's timeout on one node is not the store's outage"
    );
    assert!(
        one_between(&gate_in(&a, &live), &gate_in(&b, &live)).await,
        "node 1's gate is still shared"
    );
}

/// A master dies and its replica takes its place, as a cluster fails over: the keys it held
/// decide locally meanwhile, and are shared again once the replica serves them (the store
/// learns the new owner, and the scripts it never loaded there run), with no instance
/// restarted; a breaker that opened meanwhile is re-synced, and the outage is said over.
#[tokio::test]
async fn after_a_failover_the_replica_shares_the_dead_masters_keys() {
    let Some(mut cluster) = RedisCluster::start_replicated() else {
        return;
    };
    let heard = NodeEvents::heard(&cluster);
    let a = Redis::cluster(cluster.urls()).open().await.unwrap();
    let b = Redis::cluster(cluster.urls()).open().await.unwrap();
    let gate = name_on(&cluster, 1, "failover::gate", gate_key);
    let breaker = name_on(&cluster, 1, "failover::breaker", breaker_key);
    // Open for a minute: still open when the replica takes over.
    let minute = Duration::from_secs(60);
    let (breaker_a, breaker_b) = (
        breaker_cooling(&a, &breaker, minute),
        breaker_cooling(&b, &breaker, minute),
    );
    assert!(
        one_between(&gate_in(&a, &gate), &gate_in(&b, &gate)).await,
        "node 1's gate is shared"
    );

    cluster.kill(1);
    let calls = Calls::default();
    let (alone_a, alone_b) = (gate_in(&a, &gate), gate_in(&b, &gate));
    assert_eq!(call(&alone_a, &calls, Ok(())).await, Ok(()));
    assert_eq!(
        call(&alone_b, &calls, Ok(())).await,
        Ok(()),
        "each instance decides alone while the master is dead"
    );
    let node = node_label(&cluster, 1);
    assert!(
        settled(|| heard.count(&node) >= 1).await,
        "the dead master is said: {:?}",
        heard.said
    );
    for _ in 0..2 {
        let _ = call(&breaker_a.policy, &calls, Err(ApiError::Busy)).await;
    }
    assert_eq!(breaker_a.breaker.state(), BreakerState::Open);
    assert_eq!(
        breaker_b.breaker.state(),
        BreakerState::Closed,
        "a's opening is not told while its node is dead"
    );
    let started = Instant::now();
    let promoted = loop {
        let node = cluster.node_of(&gate_key(&gate));
        if node != 1 {
            break node;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no replica took node 1's place within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(promoted >= 3, "a replica, not another master: {promoted}");

    // A skipped node is tried again within 8 s: fresh gates and breakers on the promoted
    // replica are shared by then.
    let started = Instant::now();
    let mut round = 0;
    loop {
        round += 1;
        let gate = name_on(
            &cluster,
            promoted,
            &format!("failover::again{round}:"),
            gate_key,
        );
        if one_between(&gate_in(&a, &gate), &gate_in(&b, &gate)).await {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replica's gates are not shared 20 s after it took over: {:?}",
            heard.said
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        settled(|| breaker_b.breaker.state() == BreakerState::Open).await,
        "a's opening meanwhile is re-synced through the replica, and reaches b"
    );
    let fresh = name_on(&cluster, promoted, "failover::fresh", breaker_key);
    assert!(
        opening_reaches(&breaker_in(&a, &fresh), &breaker_in(&b, &fresh)).await,
        "a breaker on the replica is shared, its opening heard"
    );
    assert!(settled(|| heard.restored(&node) >= 2).await);
    assert_eq!(
        heard.restored(&node),
        2,
        "each store says the dead master's keys are back, once: {:?}",
        heard.restored
    );
    assert!(a.is_available() && b.is_available());
    assert_eq!((a.last_error(), b.last_error()), (None, None));

    // The store's map followed the failover: the replica, stalled, is said by its own address,
    // not the dead master's.
    let stalled = name_on(&cluster, promoted, "failover::stalled", gate_key);
    cluster.pause(promoted);
    let answered = call(&gate_in(&a, &stalled), &calls, Ok(())).await;
    cluster.resume(promoted);
    assert_eq!(answered, Ok(()), "decided locally");
    let replica = node_label(&cluster, promoted);
    // By a, whose call met it, and by b too when a busy machine stretched the pause over one
    // of b's own calls to it (seen once: two outages of the replica): each store says its own.
    assert!(
        settled(|| heard.count(&replica) >= 1).await,
        "the stalled replica {replica} is never said: {:?}",
        heard.said
    );
    assert!(
        heard.count(&replica) <= 2 && heard.count(&node) == 2,
        "the stalled replica is said by its address, the dead master no more: {:?}",
        heard.said
    );
}
