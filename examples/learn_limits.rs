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
//! 40 calls fill 4 windows).
//!
//! Then the adaptive bulkhead, against a provider that generates 8 completions at once
//! (about 400 ms each; beyond 8, 429 with `Retry-After: 1`) and halves its capacity to 4
//! from 2 s to 4 s: 100 calls by 32 workers without a bulkhead, through `bulkhead = 8`,
//! `bulkhead = 4` and `bulkhead = "adaptive"`, each with `bulkhead_queue = 32` (a caller past
//! the limit waits its turn). The last column is the bulkhead's limit on average while the
//! capacity was 4, and while it was 8: what the adaptive one learnt. A fixed bulkhead too
//! high is cheaper than it looks: a caller keeps its place while it waits out a 429, so 8
//! places hold 4 callers waiting and 4 generating. The adaptive one probes past the
//! capacity now and then (one more place after each round of successes, halved at the next
//! 429), so its limit stays a little under the capacity and it collects a 429 per probe.
//! Real time: about 65 seconds.
//!
//! cargo run --example learn_limits [-- --json]

#[tokio::main]
async fn main() -> std::io::Result<()> {
    use resil_lab::learn_limits::{run, run_bulkheads, BulkheadRow, Row, CALLS, SHRUNK, WORKERS};
    let rows = run().await?;
    let bulkheads = run_bulkheads().await?;
    if resil_lab::print_json(&rows, Row::json) {
        resil_lab::print_json(&bulkheads, BulkheadRow::json);
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
    println!();
    println!(
        "{CALLS} calls by {WORKERS} workers, capacity 8 at once → 4 from {:?} to {:?} → 8",
        SHRUNK.0, SHRUNK.1
    );
    println!(
        "{:<38} {:>6} {:>6} {:>8} {:>10} {:>16}",
        "", "× 429", "calls", "seconds", "succeeded", "limit at 4 / 8"
    );
    let limit = |limit: Option<f64>| limit.map_or("-".to_owned(), |limit| format!("{limit:.1}"));
    for row in &bulkheads {
        println!(
            "{:<38} {:>6} {:>6} {:>8.2} {:>6}/{:<3} {:>12} / {}",
            format!("{}  {}", row.row, row.name),
            row.rate_limited,
            row.calls,
            row.total.as_secs_f64(),
            row.succeeded,
            row.callers,
            limit(row.limit_shrunk),
            limit(row.limit_whole),
        );
    }
    Ok(())
}
