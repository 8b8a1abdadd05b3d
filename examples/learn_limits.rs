//! 40 callers at once against a mock provider on 127.0.0.1 that allows 10 completions per
//! 1 s window and says so on every answer, as OpenAI does (`x-ratelimit-limit-requests`,
//! `-remaining-requests`, `-reset-requests`): without a gate, through fixed gates set too high
//! (`20/s`), too low (`5/s`) and exactly (`10/s, exact`), through a gate that learns the limit
//! from the answers (`rate = "auto"`), and through one while the provider halves its limit
//! after 1.5 s and restores it after 3.5 s. Each function is `#[resilient(timeout = "5s",
//! retry = 6, ...)]` around a reqwest post and `resil::http::classify`. Columns: the
//! provider's 429s, the calls it received, the seconds until all 40 callers had their
//! outcome, the callers that succeeded, and the share of the provider's capacity used (the
//! successes over what its windows could serve, from the first to the last that saw a call:
//! 40 calls fill 4 windows). Real time: about 25 seconds.
//!
//! The adaptive bulkhead (`bulkhead = "adaptive"`) is to get a row here once it exists.
//!
//! cargo run --example learn_limits [-- --json]

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let rows = resil_lab::learn_limits::run().await?;
    if resil_lab::print_json(&rows, resil_lab::learn_limits::Row::json) {
        return Ok(());
    }
    println!(
        "{:<38} {:>6} {:>6} {:>8} {:>10} {:>9}",
        "", "× 429", "calls", "seconds", "succeeded", "capacity"
    );
    for row in &rows {
        println!(
            "{:<38} {:>6} {:>6} {:>8.2} {:>6}/{:<3} {:>8.0} %",
            format!("{}  {}", row.row, row.name),
            row.rate_limited,
            row.calls,
            row.total.as_secs_f64(),
            row.succeeded,
            row.callers,
            row.share() * 100.0
        );
    }
    Ok(())
}
