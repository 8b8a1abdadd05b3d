//! The retry storm: 100 requests from 10 parallel clients against a provider that hangs,
//! each attempt cut at 1 s. What retries do to an outage, and what a breaker and a bulkhead
//! do about it. Runs on tokio's paused clock: the 30-odd seconds of outage take no wall time.
//!
//! cargo run --example retry_storm [-- --json]

use resil_lab::retry_storm::{run, ORIGINAL};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let rows = run().await;
    if resil_lab::print_json(&rows, resil_lab::report::Row::json) {
        return;
    }
    println!("100 requests, 10 parallel clients, the provider hangs; every attempt times out after 1 s\n");
    println!(
        "{:<12} {:<34} {:>9} {:>8} {:>8} {:>6}  outcomes",
        "row", "policy", "total", "p50", "p95", "calls"
    );
    for row in &rows {
        println!(
            "{:<12} {:<34} {:>7}ms {:>6}ms {:>6}ms {:>6}  {}",
            row.row,
            row.label,
            row.total.as_millis(),
            row.p50.as_millis(),
            row.p95.as_millis(),
            row.calls,
            row.outcome_text()
        );
    }
    println!("\nThe original measured:");
    for (row, figures) in ORIGINAL {
        println!("  {row:<12} {figures}");
    }
    if let Some(c) = rows.iter().find(|row| row.row == "c") {
        println!(
            "\nresil, row c: the breaker opens on the 5th timeout and every pending retry meets it \
             open, so the provider sees {} calls (the original: 14) and the outage is over for \
             every user after {} ms (the original: 2063 ms).",
            c.calls,
            c.total.as_millis()
        );
    }
}
