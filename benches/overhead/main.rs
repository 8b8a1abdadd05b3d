//! resil against its peers: what a resilience wrapper costs on every call.
//!
//! `cargo bench -p resil-benches --bench overhead` (the package named, so that resil is built
//! with default features rather than the test lab's) runs every contender with the same
//! settings (timeout 20 s, retry 2, breaker 5, bulkhead 8) on (1) an operation ready on its
//! first poll, (2) one that yields once, (3) 1000 tasks sharing one instance on 2 worker
//! threads; then keyed-breaker lookups and rejected calls, and prints a summary table (median
//! ns per call, over bare, and the median of the release before the hardening and the
//! redesign beside it).
//!
//! Instructions per call, which repeat where these times do not, are counted by
//! `benches/instructions` (callgrind), with a budget for each that `.ci/run` checks.
#![allow(missing_docs, unreachable_pub)]

#[path = "../common.rs"]
mod common;
mod contenders;

use std::fmt;
use std::future::Future;
use std::hint::black_box;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use contenders::*;
use criterion::{BenchmarkId, Criterion};
use resil::{BreakerConfig, KeyedBreakers, Policy};

static HAND_WRITTEN: LazyLock<HandWritten> = LazyLock::new(HandWritten::default);
static PEER_STACK: LazyLock<PeerStack> = LazyLock::new(PeerStack::default);
static FAILSAFE: LazyLock<FailsafeBreaker> = LazyLock::new(failsafe_breaker);

/// Every contender on one operation, each measured on its own concrete future (no boxing
/// in the loop).
macro_rules! sequential {
    ($c:expr, $rt:expr, $group:literal, $op:expr) => {{
        let rt = &$rt;
        let tower = tower_stack();
        let tower_resilience = tower_resilience_stack();
        let mut group = $c.benchmark_group($group);
        group.bench_function("bare", |b| b.to_async(rt).iter(|| bare($op)));
        group.bench_function("tokio timeout", |b| {
            b.to_async(rt).iter(|| tokio_timeout($op))
        });
        group.bench_function("hand-written", |b| {
            b.to_async(rt).iter(|| HAND_WRITTEN.call($op))
        });
        group.bench_function("tower", |b| b.to_async(rt).iter(|| call_tower(&tower, $op)));
        group.bench_function("tower-resilience", |b| {
            b.to_async(rt).iter(|| call_tower(&tower_resilience, $op))
        });
        group.bench_function("failsafe + timeout", |b| {
            b.to_async(rt).iter(|| failsafe_timeout(&FAILSAFE, $op))
        });
        group.bench_function("backon + timeout", |b| {
            b.to_async(rt).iter(|| backon_timeout($op))
        });
        group.bench_function("four-policy peer stack", |b| {
            b.to_async(rt).iter(|| PEER_STACK.call($op))
        });
        group.bench_function("resil #[resilient]", |b| {
            b.to_async(rt).iter(|| resil_attribute($op))
        });
        group.bench_function("resil Policy", |b| {
            b.to_async(rt).iter(|| resil_policy($op))
        });
        group.finish();
    }};
}

fn sequential(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    sequential!(c, rt, "ready", Ready);
    sequential!(c, rt, "yielding", Yielding);
}

/// 1000 tasks on 2 worker threads through one shared instance, each making calls ready on
/// their first poll (so the bulkhead of 8 is never full); reports time per call.
fn contend<F, Fut>(b: &mut criterion::Bencher<'_>, rt: &tokio::runtime::Runtime, call: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future + Send,
{
    b.iter_custom(|iters| {
        rt.block_on(async {
            let per_task = iters.div_ceil(1000).max(1);
            let started = Instant::now();
            let tasks: Vec<_> = (0..1000)
                .map(|_| {
                    let call = call.clone();
                    tokio::spawn(async move {
                        for _ in 0..per_task {
                            black_box(call().await);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            started
                .elapsed()
                .mul_f64(iters as f64 / (per_task * 1000) as f64)
        })
    });
}

fn contention(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("contention");
    group.bench_function("bare", |b| contend(b, &rt, || bare(Ready)));
    group.bench_function("hand-written", |b| {
        contend(b, &rt, || HAND_WRITTEN.call(Ready))
    });
    // tower's services are shared by cloning (a clone per call, as its concurrency limit
    // requires), not boxed.
    let tower = tower_stack::<Ready>();
    group.bench_function("tower", |b| {
        let tower = tower.clone();
        contend(b, &rt, move || call_owned_tower(tower.clone(), Ready))
    });
    group.bench_function("failsafe + timeout", |b| {
        contend(b, &rt, || failsafe_timeout(&FAILSAFE, Ready))
    });
    group.bench_function("four-policy peer stack", |b| {
        contend(b, &rt, || PEER_STACK.call(Ready))
    });
    group.bench_function("resil #[resilient]", |b| {
        contend(b, &rt, || resil_attribute(Ready))
    });
    group.bench_function("resil Policy", |b| contend(b, &rt, || resil_policy(Ready)));
    group.finish();
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Tier {
    Free(u16),
    Pro(u16),
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tier::Free(n) => write!(f, "free-{n}"),
            Tier::Pro(n) => write!(f, "pro-{n}"),
        }
    }
}

fn keyed(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed lookup");
    for keys in [10usize, 10_000] {
        let breakers = KeyedBreakers::new("model", BreakerConfig::default()).with_max_keys(100_000);
        let names: Vec<String> = (0..keys).map(|n| format!("model-{n}")).collect();
        let tiers: Vec<Tier> = (0..keys as u16)
            .map(|n| {
                if n % 2 == 0 {
                    Tier::Free(n)
                } else {
                    Tier::Pro(n)
                }
            })
            .collect();
        for name in &names {
            breakers.get(name.as_str());
        }
        for tier in &tiers {
            breakers.get(tier);
        }
        let mut i = 0;
        group.bench_function(BenchmarkId::new("&str", keys), |b| {
            b.iter(|| {
                i = (i + 1) % keys;
                black_box(breakers.get(names[i].as_str()))
            })
        });
        group.bench_function(BenchmarkId::new("String", keys), |b| {
            b.iter(|| {
                i = (i + 1) % keys;
                black_box(breakers.get(&names[i]))
            })
        });
        group.bench_function(BenchmarkId::new("enum", keys), |b| {
            b.iter(|| {
                i = (i + 1) % keys;
                black_box(breakers.get(&tiers[i]))
            })
        });
    }
    group.finish();
}

fn rejected(c: &mut Criterion) {
    let mut group = c.benchmark_group("rejected");
    let open = Policy::builder()
        .breaker_named("bench-open", 1, Duration::from_secs(3600))
        .build()
        .unwrap();
    let _ = poll_once(open.run(|| async { Err::<u64, _>(Failure::Busy) }));
    group.bench_function("resil: open breaker", |b| {
        b.iter(|| poll_once(open.run(|| async { Ok::<u64, Failure>(1) })))
    });
    let full = Policy::builder().bulkhead(1).build().unwrap();
    let _held = full.execute::<Failure>();
    group.bench_function("resil: full bulkhead", |b| {
        b.iter(|| poll_once(full.run(|| async { Ok::<u64, Failure>(1) })))
    });
    let failsafe_open = failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            1,
            failsafe::backoff::constant(Duration::from_secs(3600)),
        ))
        .build();
    {
        use failsafe::futures::CircuitBreaker as _;
        let _ = poll_once(failsafe_open.call(async { Err::<u64, ()>(()) }));
        group.bench_function("failsafe: open breaker", |b| {
            b.iter(|| poll_once(failsafe_open.call(async { Ok::<u64, ()>(1) })))
        });
    }
    let semaphore = tokio::sync::Semaphore::new(1);
    let _permit = semaphore.try_acquire().unwrap();
    // The same work as resil's full bulkhead: an operation polled once, refused at its permit.
    group.bench_function("hand-written: full semaphore", |b| {
        b.iter(|| {
            poll_once(async {
                let Ok(_permit) = semaphore.try_acquire() else {
                    return Err(Failure::Busy);
                };
                Ok::<u64, Failure>(1)
            })
        })
    });
    let tower = tower_stack::<Ready>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut held = Vec::new();
    rt.block_on(async {
        use tower::ServiceExt as _;
        for _ in 0..8 {
            let mut clone = tower.clone();
            clone.ready().await.unwrap();
            held.push(clone);
        }
    });
    group.bench_function("tower: load shed", |b| {
        b.iter(|| poll_once(call_tower(&tower, Ready)))
    });
    group.finish();
}

/// The medians of the last release before the hardening and the redesign (0.1.0 as first
/// published, same machine and settings), printed beside today's so a regression shows.
/// Contention figures are ns per call (1000 / M calls/s).
const BEFORE: &[(&str, &str, f64)] = &[
    ("ready", "bare", 3.0),
    ("ready", "tokio timeout", 64.5),
    ("ready", "hand-written", 107.3),
    ("ready", "tower", 162.6),
    ("ready", "tower-resilience", 1208.1),
    ("ready", "failsafe + timeout", 112.3),
    ("ready", "backon + timeout", 103.8),
    ("ready", "four-policy peer stack", 183.5),
    ("ready", "resil #[resilient]", 83.4),
    ("ready", "resil Policy", 84.9),
    ("yielding", "tokio timeout", 597.8),
    ("yielding", "hand-written", 641.7),
    ("yielding", "failsafe + timeout", 671.9),
    ("yielding", "backon + timeout", 668.4),
    ("yielding", "tower", 738.9),
    ("yielding", "resil Policy", 710.0),
    ("yielding", "resil #[resilient]", 729.2),
    ("contention", "hand-written", 218.8),
    ("contention", "failsafe + timeout", 277.8),
    ("contention", "four-policy peer stack", 322.6),
    ("contention", "resil #[resilient]", 78.0),
    ("contention", "resil Policy", 86.9),
    ("rejected", "resil: open breaker", 138.0),
    ("rejected", "resil: full bulkhead", 98.0),
    ("rejected", "failsafe: open breaker", 64.0),
    ("rejected", "tower: load shed", 178.0),
];

/// The figure before the redesign, formatted for the table's last column.
fn before(group: &str, name: &str, show: impl Fn(f64) -> String) -> String {
    BEFORE
        .iter()
        .find(|(g, n, _)| *g == group && *n == name)
        .map_or_else(|| "-".to_owned(), |(_, _, ns)| show(*ns))
}

/// Reads criterion's medians back and prints one table.
fn summary() {
    // Criterion writes under the workspace's target directory, while `cargo bench` runs this
    // binary from the benches crate's own directory: find it from the binary's path
    // (target/release/deps/overhead-…).
    let root = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            exe.ancestors().nth(3).map(std::path::Path::to_path_buf)
        })
        .unwrap_or_else(|| "target".into());
    let root = root.display();
    let median = |group: &str, name: &str| -> Option<f64> {
        let path = format!(
            "{root}/criterion/{group}/{}/new/estimates.json",
            name.replace(':', "_")
        );
        let text = std::fs::read_to_string(path).ok()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        value["median"]["point_estimate"].as_f64()
    };
    println!(
        "\n== resil and its peers: median ns per call (over bare; × tokio timeout; before the redesign) =="
    );
    if cfg!(feature = "observability") {
        println!("(resil built with tracing and metrics, no subscriber, no recorder)");
    }
    for group in ["ready", "yielding"] {
        let bare = median(group, "bare").unwrap_or(0.0);
        let timeout = median(group, "tokio timeout").unwrap_or(f64::NAN);
        println!("\n{group}:");
        for name in [
            "bare",
            "tokio timeout",
            "hand-written",
            "tower",
            "tower-resilience",
            "failsafe + timeout",
            "backon + timeout",
            "four-policy peer stack",
            "resil #[resilient]",
            "resil Policy",
        ] {
            if let Some(ns) = median(group, name) {
                println!(
                    "  {name:<26} {ns:>8.1} ns   +{:>7.1}   {:>5.2}×   before {:>7}",
                    ns - bare,
                    ns / timeout,
                    before(group, name, |ns| format!("{ns:.1}"))
                );
            }
        }
    }
    println!("\ncontention (2 workers, 1000 tasks, one shared instance):");
    let hand = median("contention", "hand-written").unwrap_or(f64::NAN);
    for name in [
        "bare",
        "hand-written",
        "tower",
        "failsafe + timeout",
        "four-policy peer stack",
        "resil #[resilient]",
        "resil Policy",
    ] {
        if let Some(ns) = median("contention", name) {
            println!(
                "  {name:<26} {:>6.2} M calls/s   {:>5.2}× hand-written   before {:>5}",
                1e3 / ns,
                hand / ns,
                before("contention", name, |ns| format!("{:.2}", 1e3 / ns))
            );
        }
    }
    println!("\nkeyed lookup (before the redesign: 28–37 ns for every key type and count):");
    for keys in ["10", "10000"] {
        for key in ["&str", "String", "enum"] {
            if let Some(ns) = median("keyed lookup", &format!("{key}/{keys}")) {
                println!("  {key:<7} {keys:>6} keys   {ns:>6.1} ns");
            }
        }
    }
    println!(
        "  memory per keyed breaker: resil-runtime/tests/alloc.rs (counted apart from timings)"
    );
    println!("\nrejected call:");
    for name in [
        "resil: open breaker",
        "resil: full bulkhead",
        "failsafe: open breaker",
        "hand-written: full semaphore",
        "tower: load shed",
    ] {
        if let Some(ns) = median("rejected", name) {
            println!(
                "  {name:<26} {ns:>6.1} ns   before {:>6}",
                before("rejected", name, |ns| format!("{ns:.1}"))
            );
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    sequential(&mut c);
    contention(&mut c);
    keyed(&mut c);
    rejected(&mut c);
    c.final_summary();
    summary();
}
