//! Two instances of one service share their circuit breaker and their 10/s rate gate through
//! Redis: one sees the outage and opens, the other rejects without calling; the gate holds
//! across both; Redis is killed mid-run and both go on (fail-open), then come back in sync
//! when it restarts. Starts its own redis-server on 127.0.0.1 (`apt-get install
//! redis-server` if missing). Real time: about 15 seconds.
//!
//! cargo run --example two_instances --features redis

#[tokio::main]
async fn main() -> std::io::Result<()> {
    if !resil_lab::redis_server::RedisServer::installed() {
        println!(
            "redis-server is not installed: `apt-get install -y redis-server`, then run this again"
        );
        return Ok(());
    }
    match resil_lab::two_instances::run().await? {
        Some(report) => resil_lab::two_instances::print(&report),
        None => println!("skipped: RESIL_SKIP_REDIS is set"),
    }
    Ok(())
}
