//! Instructions per call, counted by callgrind: the regression gate `.ci/run` runs.
//!
//! `cargo run --release -p resil-benches --bin instructions` runs each scenario under
//! `valgrind --tool=callgrind` twice, with 1 000 and 11 000 calls, and divides the difference
//! by 10 000: setup, the runtime and the first calls' allocations cancel out, and what is
//! left is one warm call. Counts repeat exactly for one binary, whatever else the machine
//! does, where times move by 10 % between runs; so each count has a budget, and a change
//! that adds more than [`TOLERANCE`] to one fails, saying by how much.
//!
//! Most calls are operations ready on their first poll, polled once with a no-op waker inside
//! a current-thread runtime: what the wrapper itself costs. The `-yield` scenarios' bodies are
//! pending once, and are polled twice: a real timer is armed, polled and cancelled, as with a
//! provider's answer arriving between two polls.
//! `instructions run <scenario> <calls>` is what runs under valgrind.
#![allow(missing_docs, unreachable_pub)]

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::process::{Command, ExitCode};
use std::task::{Context, Poll};
use std::time::Duration;

use resil::{resilient, Policy, Rejected};

#[path = "../common.rs"]
mod common;
use common::{poll_once, Failure};

/// How far over its budget a count may go before the gate fails.
const TOLERANCE: f64 = 0.05;

/// With `--features observability` the counts are printed beside the default build's budgets,
/// to show what the features cost a user who installs no subscriber and no recorder.
const OBSERVABILITY: bool = cfg!(feature = "observability");

/// Each scenario, what it is, and its budget in instructions per call (rustc 1.95, x86_64,
/// default features), about 1 % above the count: the same source built in another directory
/// has counted up to 2 % apart. Lower a budget when a change wins instructions back.
const SCENARIOS: &[(&str, &str, Option<u64>)] = &[
    ("bare", "the body alone, awaited in an async fn", None),
    ("tokio-timeout", "tokio::time::timeout around it", None),
    ("timeout", "#[resilient(timeout)]", Some(605)),
    (
        "timeout+retry",
        "#[resilient(timeout, retry = 2)]",
        Some(622),
    ),
    (
        "all-four",
        "timeout, retry 2, breaker, bulkhead 8",
        Some(917),
    ),
    (
        "all-four-keyed",
        "the same with a per_model breaker, 10 models",
        Some(1580),
    ),
    ("policy", "Policy::run with all four (no macro)", Some(1061)),
    (
        "open-breaker",
        "a call refused by an open breaker",
        Some(1006),
    ),
    (
        "full-bulkhead",
        "a call refused by a full bulkhead",
        Some(657),
    ),
    (
        "tokio-timeout-yield",
        "tokio::time::timeout, the body pending once",
        None,
    ),
    (
        "all-four-yield",
        "all four, the body pending once (a timer armed)",
        Some(1982),
    ),
];

fn ready() -> impl Future<Output = Result<u64, Failure>> {
    std::future::ready(Ok(black_box(1)))
}

/// Pending on its first poll and ready on its second, waking no one: a provider's answer
/// arriving between two polls, as most do.
struct PendingOnce(bool);

impl Future for PendingOnce {
    type Output = Result<u64, Failure>;

    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(Ok(black_box(1)));
        }
        Poll::Pending
    }
}

fn pending_once() -> impl Future<Output = Result<u64, Failure>> {
    PendingOnce(false)
}

/// Polls a future twice with a no-op waker: the yielding calls' two polls.
fn poll_twice<F: Future>(future: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut future = std::pin::pin!(future);
    let _ = future.as_mut().poll(&mut cx);
    future.poll(&mut cx)
}

async fn tokio_timeout_yield() -> Result<u64, Failure> {
    tokio::time::timeout(Duration::from_secs(20), pending_once())
        .await
        .map_err(|_| Failure::Busy)?
}

#[resilient(
    timeout = "20s",
    retry = 2,
    breaker = "instructions-yield",
    bulkhead = 8
)]
async fn all_four_yield() -> Result<u64, Failure> {
    pending_once().await
}

async fn bare() -> Result<u64, Failure> {
    ready().await
}

async fn tokio_timeout() -> Result<u64, Failure> {
    tokio::time::timeout(Duration::from_secs(20), ready())
        .await
        .map_err(|_| Failure::Busy)?
}

#[resilient(timeout = "20s")]
async fn timeout() -> Result<u64, Failure> {
    ready().await
}

#[resilient(timeout = "20s", retry = 2)]
async fn timeout_retry() -> Result<u64, Failure> {
    ready().await
}

#[resilient(timeout = "20s", retry = 2, breaker = "instructions", bulkhead = 8)]
async fn all_four() -> Result<u64, Failure> {
    ready().await
}

#[resilient(timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8)]
async fn all_four_keyed(model: &str) -> Result<u64, Failure> {
    black_box(model);
    ready().await
}

#[resilient(breaker = "instructions-open")]
async fn behind_open_breaker(fail: bool) -> Result<u64, Failure> {
    if fail {
        return Err(Failure::Busy);
    }
    ready().await
}

#[resilient(bulkhead = 1)]
async fn behind_full_bulkhead(hold: bool) -> Result<u64, Failure> {
    if hold {
        std::future::pending::<()>().await;
    }
    ready().await
}

/// Makes `calls` calls of one scenario.
fn run(scenario: &str, calls: u32) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let calls = 0..calls;
    match scenario {
        "bare" => calls.for_each(|_| drop(black_box(poll_once(bare())))),
        "tokio-timeout" => calls.for_each(|_| drop(black_box(poll_once(tokio_timeout())))),
        "timeout" => calls.for_each(|_| drop(black_box(poll_once(timeout())))),
        "timeout+retry" => calls.for_each(|_| drop(black_box(poll_once(timeout_retry())))),
        "all-four" => calls.for_each(|_| drop(black_box(poll_once(all_four())))),
        "all-four-keyed" => {
            let models: Vec<String> = (0..10).map(|n| format!("model-{n}")).collect();
            calls.for_each(|n| {
                let model = &models[n as usize % models.len()];
                drop(black_box(poll_once(all_four_keyed(model))));
            })
        }
        "policy" => {
            let policy = Policy::builder()
                .timeout(Duration::from_secs(20))
                .retry(2)
                .breaker_named("instructions-policy", 5, Duration::from_secs(30))
                .bulkhead(8)
                .build()
                .expect("a valid policy");
            calls.for_each(|_| drop(black_box(poll_once(policy.run(ready)))))
        }
        "open-breaker" => {
            let opened = (0..100).any(|_| {
                matches!(
                    poll_once(behind_open_breaker(true)),
                    Poll::Ready(Err(Failure::Rejected(Rejected::BreakerOpen { .. })))
                )
            });
            assert!(opened, "the breaker opens after its threshold of failures");
            calls.for_each(|_| drop(black_box(poll_once(behind_open_breaker(false)))))
        }
        "tokio-timeout-yield" => {
            calls.for_each(|_| drop(black_box(poll_twice(tokio_timeout_yield()))))
        }
        "all-four-yield" => calls.for_each(|_| drop(black_box(poll_twice(all_four_yield())))),
        "full-bulkhead" => {
            let mut holder = Box::pin(behind_full_bulkhead(true));
            assert!(
                poll_once(holder.as_mut()).is_pending(),
                "holds the one place"
            );
            calls.for_each(|_| drop(black_box(poll_once(behind_full_bulkhead(false)))))
        }
        other => panic!("no scenario {other:?}: one of {:?}", names()),
    }
}

fn names() -> Vec<&'static str> {
    SCENARIOS.iter().map(|(name, ..)| *name).collect()
}

/// The instructions callgrind counted for `calls` calls of `scenario`.
fn count(scenario: &str, calls: u32) -> Result<u64, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(me)
        .args(["run", scenario, &calls.to_string()])
        .output()
        .map_err(|e| {
            format!("cannot run valgrind ({e}): install it (apt-get install -y valgrind)")
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        return Err(format!("{scenario} failed under valgrind:\n{stderr}"));
    }
    stderr
        .lines()
        .find_map(|line| line.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no 'Collected' line in callgrind's output:\n{stderr}"))
}

fn per_call(scenario: &str) -> Result<f64, String> {
    let (few, many) = (count(scenario, 1_000)?, count(scenario, 11_000)?);
    Ok(many.saturating_sub(few) as f64 / 10_000.0)
}

fn check() -> Result<bool, String> {
    if OBSERVABILITY {
        println!("instructions per call, tracing and metrics compiled in, none installed");
    } else {
        println!(
            "instructions per call (callgrind; budget +{:.0} % fails)",
            TOLERANCE * 100.0
        );
    }
    let mut within = true;
    for (name, what, budget) in SCENARIOS {
        let counted = per_call(name)?;
        let Some(budget) = budget else {
            println!("  {name:<19} {counted:>7.0}            {what}");
            continue;
        };
        let over = counted / *budget as f64 - 1.0;
        let verdict = if OBSERVABILITY {
            format!("{:+.1} % on the default build's", over * 100.0)
        } else if over > TOLERANCE {
            within = false;
            format!("OVER by {:+.1} %", over * 100.0)
        } else if over < -2.0 * TOLERANCE {
            format!("{:+.1} %: lower the budget", over * 100.0)
        } else {
            format!("{:+.1} %", over * 100.0)
        };
        println!("  {name:<19} {counted:>7.0}  of {budget:>5}  {verdict:<34} {what}");
    }
    if !within {
        println!(
            "a count is over its budget: find what the change added (valgrind --tool=callgrind \
             target/release/instructions run <scenario> 10000, then callgrind_annotate), or, if \
             the cost is wanted, raise the budget in benches/instructions/main.rs and say why"
        );
    }
    Ok(within)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let [_, run_, scenario, calls] = args.as_slice() {
        if run_ == "run" {
            run(scenario, calls.parse().expect("a number of calls"));
            return ExitCode::SUCCESS;
        }
    }
    match check() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
