//! A tower client against the mock provider on 127.0.0.1 during an outage (every completion
//! answers 503 with `Retry-After: 1`): 20 callers through a plain service, a retrying
//! `resil::tower::PolicyLayer`, and a retrying one with a breaker; the requests the provider
//! saw. Real time: about 5 seconds.
//!
//! cargo run --example tower_client

#[tokio::main]
async fn main() -> std::io::Result<()> {
    resil_lab::interop::print("tower layer", &resil_lab::interop::run().await?);
    println!(
        "\nThe same policies #[resilient] gives a function. Retries alone triple the requests to \
         a provider that is down; with the breaker, the 20 first attempts fail, it opens at the \
         5th failure, and no retry is sent into it."
    );
    Ok(())
}
