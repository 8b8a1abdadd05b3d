//! The thundering herd: clients against a server that serves 3 at once and answers 429 with
//! `Retry-After: 1`. No jitter, full jitter, and full jitter behind a client-side gate of 3,
//! over 3 seeds each.
//!
//! cargo run --example thundering_herd [-- --json]

use resil_lab::thundering_herd::{run, ORIGINAL};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let rows = run().await;
    if resil_lab::print_json(&rows, resil_lab::thundering_herd::Row::json) {
        return;
    }
    println!("server: 3 at once, 125 ms each, 429 + Retry-After: 1 beyond; every client sends one request\n");
    println!(
        "{:>7}  {:<24} {:>4} {:>9} {:>6} {:>9} {:>17}",
        "clients", "pacing", "seed", "requests", "429s", "total", "retries/client"
    );
    for row in &rows {
        println!(
            "{:>7}  {:<24} {:>4} {:>9} {:>6} {:>8.1}s {:>17.1}",
            row.clients,
            row.variant.name(),
            row.seed,
            row.requests,
            row.rejected,
            row.total.as_secs_f64(),
            row.retries_per_client
        );
    }
    println!("\nThe original: {ORIGINAL}.");
    println!(
        "resil adds the jitter on top of Retry-After (never under it), so clients told \
         \"1 second\" do not all come back in the same millisecond."
    );
}
