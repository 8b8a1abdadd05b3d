//! The same requests against a mock provider on 127.0.0.1 that lets 50 per second through
//! and answers the rest 429 `Retry-After: 1`: without a gate, with a rate gate, with a gate
//! too fast that learns from the 429s, and with a token gate; then 20 requests through a queue
//! in front of a provider that serves 3 at once. Real time: about 10 seconds.
//!
//! cargo run --example rate_limits [-- --json]

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let rows = resil_lab::rate_limits::run(100).await?;
    if resil_lab::print_json(&rows, resil_lab::rate_limits::Row::json) {
        return Ok(());
    }
    println!(
        "{:<42} {:>9} {:>9} {:>6} {:>9}",
        "", "answered", "requests", "× 429", "total"
    );
    for row in &rows {
        println!(
            "{:<42} {:>5}/{:<3} {:>9} {:>6} {:>7} ms",
            row.name,
            row.answered,
            row.callers,
            row.provider.requests,
            row.provider.rate_limited,
            row.total.as_millis()
        );
    }
    Ok(())
}
