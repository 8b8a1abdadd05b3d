//! The retry storm: 100 requests from 10 parallel clients against a provider that hangs,
//! each attempt cut at 1 s. What retries do to an outage, and what a breaker and a bulkhead
//! do about it. Runs on tokio's paused clock: the 30-odd seconds of outage take no wall time.
//!
//! cargo run --example retry_storm [-- --json] [-- --svg storm.svg]
//!
//! `--svg storm.svg` also draws each row's timeline, to `storm-a.svg`, `storm-b.svg`, ...: one
//! line per request, each attempt a bar (green ok, orange timeout, red error, grey refused
//! without a call), waits as the gaps, and the breaker's state as a band above (green closed,
//! red open, yellow half-open).

use resil_lab::retry_storm::{run_recorded, ORIGINAL};
use resil_lab::timeline::{draw, requested};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> std::io::Result<()> {
    let svg = requested();
    let recorded = run_recorded(svg.as_ref().map(|(_, timeline)| &**timeline)).await;
    let path = svg.as_ref().map(|(path, _)| path.as_path());
    let rows = draw(path, recorded, |row| {
        (
            row.row.to_owned(),
            format!("row {}: {}", row.row, row.label),
        )
    })?;
    if resil_lab::print_json(&rows, resil_lab::report::Row::json) {
        return Ok(());
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
    Ok(())
}
