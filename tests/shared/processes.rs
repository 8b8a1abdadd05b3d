//! Two OS processes share a 10/s gate through a real Redis that is killed and restarted: while
//! it is down each runs its local gate at its share (5/s, having seen the other), so together
//! they send about 10/s, not 20/s, and about that in the seconds after Redis returns too.
//!
//! The processes are this test binary run again: [`sender`] is a test that does nothing unless
//! `RESIL_SENDER_URL` is set, and then sends through the gate for `RESIL_SENDER_SECS`,
//! printing `SEND {unix ms}` for each call.

use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

const RATE: u64 = 10;
const NAME: &str = "two::processes";

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// One process of the pair: sends as fast as the shared gate lets it.
#[tokio::test]
async fn sender() {
    let (Ok(url), Ok(secs)) = (
        std::env::var("RESIL_SENDER_URL"),
        std::env::var("RESIL_SENDER_SECS"),
    ) else {
        return;
    };
    let store = Redis::open(&url).await.expect("a Redis URL");
    let policy = Policy::builder()
        .name(NAME)
        .rate(RATE, Duration::from_secs(1), 1)
        .shared_in(&store)
        // Redis decides while it is up, however late a busy machine lets it answer.
        .shared_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs.parse().unwrap());
    let calls = Calls::default();
    while Instant::now() < until {
        let sent = policy
            .run(|| async {
                calls.add();
                Ok::<_, ApiError>(unix_ms())
            })
            .await;
        if let Ok(at) = sent {
            println!("SEND {at}");
        }
    }
}

/// Sends (unix ms) in `[from, to)`, per second.
fn rate_in(sends: &[u64], from: u64, to: u64) -> f64 {
    let count = sends.iter().filter(|at| (from..to).contains(at)).count();
    count as f64 * 1000.0 / (to - from) as f64
}

#[tokio::test]
async fn two_processes_send_about_the_shared_rate_while_redis_is_down_and_after() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args(["processes::sender", "--exact", "--nocapture"])
                .env("RESIL_SENDER_URL", server.url())
                .env("RESIL_SENDER_SECS", "12")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("the test binary runs again")
        })
        .collect();
    // Both send through Redis, and each hears of the other (a heartbeat a second); a busy
    // machine may take a second or more to start them.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let killed = unix_ms();
    server.kill();
    tokio::time::sleep(Duration::from_millis(4000)).await;
    server.restart();
    let restarted = unix_ms();
    let mut sends = Vec::new();
    for child in children {
        let output = tokio::task::spawn_blocking(|| child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mine: Vec<u64> = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("SEND ")?.parse().ok())
            .collect();
        assert!(!mine.is_empty(), "a sender sent nothing: {stdout}");
        sends.extend(mine);
    }
    let first = *sends.iter().min().unwrap();
    let up_from = first + 1000;
    assert!(
        killed >= up_from + 1000,
        "the senders started {} ms before the kill: too late to measure",
        killed.saturating_sub(first)
    );
    let up = rate_in(&sends, up_from, killed);
    // From the moment both know Redis is gone (a failed round trip, 50 ms at most).
    let down = rate_in(&sends, killed + 200, restarted);
    let back = rate_in(&sends, restarted, restarted + 3000);
    let rates = format!("up {up:.1}/s, down {down:.1}/s, back {back:.1}/s");
    // Each at the whole rate would send 20/s while Redis is down; at their share, 10/s. A
    // window may hold one start more at each edge than the rate gives it (a start delayed by
    // a busy machine), two in all.
    let edges = |from: u64, to: u64| 2000.0 / (to - from) as f64;
    assert!(up <= RATE as f64 + edges(up_from, killed), "{rates}");
    assert!((7.0..=12.0).contains(&down), "{rates}");
    // Until both have reconnected (within 2 s), one may take the store's 10/s while the
    // other still runs at its 5/s: (2 × 15 + 10) / 3 ≈ 13.3/s, and the edges.
    let most = (2.0 * 15.0 + 10.0) / 3.0 + edges(restarted, restarted + 3000);
    assert!(back <= most, "{rates}");
}
