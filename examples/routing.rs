//! A route over three models, each behind a mock provider on 127.0.0.1 (started and stopped
//! by this program): A is down, B's provider throttles once its quota of 20 is used, C is
//! healthy with a slow tail of first tokens. The same 200 streamed requests go to their
//! caller's model only, then over a route of all three. Real time: about 8 seconds.
//!
//! cargo run --example routing [-- --json]

use resil_lab::routing::{run, Row, MODELS, QUOTA, REQUESTS, TAIL};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let rows = run().await?;
    if resil_lab::print_json(&rows, Row::json) {
        return Ok(());
    }
    println!(
        "{REQUESTS} streamed requests, first choices cycling over {}:\n  A down (503); B \
         throttled after {QUOTA} requests (429, Retry-After: 60); C slow to its first token 1 \
         time in {} ({} s)\n",
        MODELS.join(", "),
        TAIL.0,
        TAIL.1.as_secs()
    );
    println!(
        "{:<10}{:^18}  {:^21}   outcomes",
        "", "requests sent to", "time to first token"
    );
    let [a, b, c] = MODELS;
    println!("{:<10}{a:>6}{b:>6}{c:>6}  {:>10}{:>11}", "", "p50", "p99");
    for row in &rows {
        let [a, b, c] = row.sent;
        let failed = match row.failures() {
            0 => "0 failed".to_owned(),
            n => format!("{n} failed ({})", row.failed_text()),
        };
        println!(
            "{:<10}{a:>6}{b:>6}{c:>6}  {:>7} ms{:>8} ms   {} ok, {failed}",
            row.way.name(),
            row.p50.as_millis(),
            row.p99.as_millis(),
            row.ok
        );
    }
    println!(
        "\nThe route skips A once its breaker is open, and B once its gate holds for the 429's\n\
         Retry-After, without a request; C serves the rest, and with them its tail."
    );
    Ok(())
}
