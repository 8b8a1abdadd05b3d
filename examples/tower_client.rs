//! A tower client against the mock provider on 127.0.0.1 during an outage (every completion
//! answers 503 with `Retry-After: 1`): 20 callers through a plain service, a retrying
//! `resil::tower::PolicyLayer`, and a retrying one with a breaker; the requests the provider
//! saw. Real time: about 5 seconds.
//!
//! cargo run --example tower_client

#[tokio::main]
async fn main() -> std::io::Result<()> {
    println!("20 callers, the provider answers 503 (Retry-After: 1) to everything\n");
    println!(
        "{:<44} {:>9} {:>9} {:>9}",
        "tower layer", "answered", "requests", "total"
    );
    for row in resil_lab::interop::run().await? {
        println!(
            "{:<44} {:>6}/20 {:>9} {:>6} ms",
            row.label,
            row.answered,
            row.requests,
            row.total.as_millis()
        );
    }
    println!(
        "\nThe same policies #[resilient] gives a function. Retries alone triple the requests to \
         a provider that is down; with the breaker, the 20 first attempts fail, it opens at the \
         5th failure, and no retry is sent into it."
    );
    Ok(())
}
