//! Triage: a provider answering 401. Retry everything, or ask the error?
//!
//! cargo run --example triage [-- --json]

use resil_lab::triage::{run, ORIGINAL};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let (naive, classified) = run().await;
    let rows = [("retry everything", &naive), ("Transient", &classified)];
    for (client, outcome) in rows {
        if resil_lab::json_requested() {
            println!("{}", outcome.json(client));
        } else {
            println!(
                "{client:<17} {} request(s), {:>6} ms, ended with {}",
                outcome.requests,
                outcome.elapsed.as_millis(),
                outcome.status
            );
        }
    }
    if !resil_lab::json_requested() {
        println!("\nThe original: {ORIGINAL}.");
    }
}
