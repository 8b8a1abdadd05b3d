//! A route over three models, each behind a mock provider on 127.0.0.1 (started and stopped
//! by this program): A is down, B's provider throttles once its quota of 20 is used, C is
//! healthy with a slow tail of first tokens. The same 200 streamed requests go to their
//! caller's model only, then over a route of all three, each without and with a hedge (one
//! more attempt after 800 ms without a first token). Real time: about 8 seconds.
//!
//! cargo run --example routing [-- --json]

use resil_lab::routing::{run, Row, HEDGE_AFTER, MODELS, QUOTA, REQUESTS, TAIL};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let rows = run().await?;
    if resil_lab::print_json(&rows, Row::json) {
        return Ok(());
    }
    let tail = TAIL.1.as_secs();
    println!(
        "{REQUESTS} streamed requests, first choices cycling over {}:\n  A down (503); B \
         throttled after {QUOTA} requests (429, Retry-After: 60); C slow to its first token 1 \
         time in {} ({tail} s)\n  hedge: one more attempt after {} ms without a first token\n",
        MODELS.join(", "),
        TAIL.0,
        HEDGE_AFTER.as_millis()
    );
    println!(
        "{:<15}{:^18}  {:^29}   outcomes",
        "", "requests sent to", "time to first token"
    );
    let [a, b, c] = MODELS;
    let over = format!("≥ {tail} s");
    println!(
        "{:<15}{a:>6}{b:>6}{c:>6}  {:>10}{:>11}{over:>8}",
        "", "p50", "p99"
    );
    for row in &rows {
        let [a, b, c] = row.sent;
        let failed = match row.failures() {
            0 => "0 failed".to_owned(),
            n => format!("{n} failed ({})", row.failed_text()),
        };
        let hedges = match row.hedges {
            0 => String::new(),
            n => format!("; {n} hedges"),
        };
        println!(
            "{:<15}{a:>6}{b:>6}{c:>6}  {:>7} ms{:>8} ms{:>8}   {} ok, {failed}{hedges}",
            row.way.name(),
            row.p50.as_millis(),
            row.p99.as_millis(),
            row.slow,
            row.ok
        );
    }
    println!(
        "\nThe route skips A once its breaker is open, and B once its gate holds for the 429's\n\
         Retry-After, without a request; C serves the rest, and with them its tail. A hedge\n\
         goes to the next target that would call: here only C does, as without a route. It\n\
         cuts the tail to the delay and one more first token, and is one more request for C\n\
         (counted above); 1 in 10 of them is slow too, and its request waits the tail still.\n\
         C does not replay by Idempotency-Key: a provider that does answers a hedge on the\n\
         same model, which carries the same key, from the slow answer it races."
    );
    Ok(())
}
