//! One scarce limit shared by an interactive UI, a batch job and several tenants, against the
//! [mock provider](crate::mock) over loopback and real time: the same calls through a `50/s`
//! gate served in arrival order, by `priority`, and by `priority` with `fair` turns across
//! tenants. What each class and tenant waited for its slot.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::join_all;
use resil::http::classify;
use resil::{resilient, Priority};

use crate::mock::MockProvider;
use crate::report::percentile;
use crate::ApiError;

/// A client whose methods differ only in how their waiters are served.
#[derive(Debug)]
pub struct SharedLimit {
    http: reqwest::Client,
    url: String,
}

impl SharedLimit {
    async fn post(&self) -> Result<(), ApiError> {
        let response = self.http.post(&self.url).send().await?;
        classify(response).await?.bytes().await?;
        Ok(())
    }

    /// In arrival order: whoever queued first goes first.
    #[resilient(rate = "50/s, burst 1", retry = 3, deadline = "30s")]
    async fn arrival_order(
        &self,
        _tenant: &str,
        _class: Priority,
        waits: &Waits,
    ) -> Result<(), ApiError> {
        waits.started();
        self.post().await
    }

    /// The most urgent waiter first.
    #[resilient(rate = "50/s, burst 1", retry = 3, deadline = "30s", priority = class)]
    async fn by_priority(
        &self,
        _tenant: &str,
        class: Priority,
        waits: &Waits,
    ) -> Result<(), ApiError> {
        let _ = class;
        waits.started();
        self.post().await
    }

    /// The most urgent waiter first, and tenants of one class in turn.
    #[resilient(
        rate = "50/s, burst 1",
        retry = 3,
        deadline = "30s",
        priority = class,
        fair = tenant
    )]
    async fn by_priority_and_tenant(
        &self,
        tenant: &str,
        class: Priority,
        waits: &Waits,
    ) -> Result<(), ApiError> {
        let _ = (tenant, class);
        waits.started();
        self.post().await
    }
}

/// How the gate serves its waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serving {
    /// `rate = "50/s"` alone.
    ArrivalOrder,
    /// `priority = class`.
    ByPriority,
    /// `priority = class, fair = tenant`.
    ByPriorityAndTenant,
}

impl Serving {
    /// What the function declares.
    pub fn name(self) -> &'static str {
        match self {
            Serving::ArrivalOrder => "rate = \"50/s\" (arrival order)",
            Serving::ByPriority => "+ priority = class",
            Serving::ByPriorityAndTenant => "+ priority = class, fair = tenant",
        }
    }
}

/// One caller's wait: from its arrival to its first attempt's start.
#[derive(Debug)]
struct Waits {
    arrived: Instant,
    waited: Mutex<Option<Duration>>,
}

impl Waits {
    fn started(&self) {
        let mut waited = self.waited.lock().unwrap();
        waited.get_or_insert(self.arrived.elapsed());
    }
}

/// Who calls: a tenant, its class, how many calls, when the first arrives and how far apart.
struct Workload {
    tenant: &'static str,
    class: Priority,
    calls: u32,
    first: Duration,
    every: Duration,
}

/// A backfill queues 100 batch calls at once (2 s of the gate); a heavy user 40 default ones;
/// a light user 8 default ones, one every 100 ms; a chat UI 10 critical ones, one every 200 ms.
const WORKLOADS: [Workload; 4] = [
    Workload {
        tenant: "backfill",
        class: Priority::Batch,
        calls: 100,
        first: Duration::ZERO,
        every: Duration::ZERO,
    },
    Workload {
        tenant: "heavy user",
        class: Priority::Default,
        calls: 40,
        first: Duration::from_millis(200),
        every: Duration::ZERO,
    },
    Workload {
        tenant: "light user",
        class: Priority::Default,
        calls: 8,
        first: Duration::from_millis(300),
        every: Duration::from_millis(100),
    },
    Workload {
        tenant: "chat",
        class: Priority::Critical,
        calls: 10,
        first: Duration::from_millis(100),
        every: Duration::from_millis(200),
    },
];

/// What one tenant waited, under one way of serving.
#[derive(Debug, Clone)]
pub struct Row {
    /// How the gate served its waiters.
    pub serving: Serving,
    /// Who called.
    pub tenant: &'static str,
    /// Its class.
    pub class: Priority,
    /// Its calls answered, of all it made.
    pub answered: usize,
    /// Its calls.
    pub calls: usize,
    /// The median wait for a slot.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
}

impl Row {
    /// The row for machines.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "serving": self.serving.name(),
            "tenant": self.tenant,
            "class": self.class.as_str(),
            "answered": self.answered,
            "calls": self.calls,
            "p50_ms": self.p50.as_millis() as u64,
            "p99_ms": self.p99.as_millis() as u64,
        })
    }
}

/// Runs the workloads through each way of serving, against a provider that lets 60 calls a
/// second through (the gate's 50 with room for a busy machine's late timers).
pub async fn run() -> std::io::Result<Vec<Row>> {
    let mock = MockProvider::with_rate_limit(60).await?;
    let client = SharedLimit {
        http: reqwest::Client::new(),
        url: mock.url("/v1/chat/completions"),
    };
    let mut rows = Vec::new();
    for serving in [
        Serving::ArrivalOrder,
        Serving::ByPriority,
        Serving::ByPriorityAndTenant,
    ] {
        rows.extend(serve(&client, serving).await);
        // The provider's window forgets this run's calls.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    mock.stop().await;
    Ok(rows)
}

async fn serve(client: &SharedLimit, serving: Serving) -> Vec<Row> {
    let origin = Instant::now();
    let calls = WORKLOADS.iter().flat_map(|load| {
        (0..load.calls).map(move |n| async move {
            let at = load.first + load.every * n;
            tokio::time::sleep_until((origin + at).into()).await;
            let waits = Waits {
                arrived: Instant::now(),
                waited: Mutex::new(None),
            };
            let (tenant, class) = (load.tenant, load.class);
            let result = match serving {
                Serving::ArrivalOrder => client.arrival_order(tenant, class, &waits).await,
                Serving::ByPriority => client.by_priority(tenant, class, &waits).await,
                Serving::ByPriorityAndTenant => {
                    client.by_priority_and_tenant(tenant, class, &waits).await
                }
            };
            (
                load.tenant,
                result.is_ok(),
                waits.waited.into_inner().unwrap(),
            )
        })
    });
    let results = join_all(calls).await;
    WORKLOADS
        .iter()
        .map(|load| {
            let mine: Vec<_> = results.iter().filter(|r| r.0 == load.tenant).collect();
            let mut waits: Vec<Duration> = mine.iter().filter_map(|r| r.2).collect();
            waits.sort();
            Row {
                serving,
                tenant: load.tenant,
                class: load.class,
                answered: mine.iter().filter(|r| r.1).count(),
                calls: mine.len(),
                p50: percentile(&waits, 50),
                p99: percentile(&waits, 99),
            }
        })
        .collect()
}
