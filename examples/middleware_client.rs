//! A `reqwest_middleware` client against the mock provider on 127.0.0.1 during an outage
//! (every completion answers 503 with `Retry-After: 1`): 20 callers through no policy, a
//! retrying `resil::middleware::PolicyMiddleware`, and a retrying one with a breaker; the
//! requests the provider saw. Real time: about 5 seconds.
//!
//! cargo run --example middleware_client

#[tokio::main]
async fn main() -> std::io::Result<()> {
    println!("20 callers, the provider answers 503 (Retry-After: 1) to everything\n");
    println!(
        "{:<44} {:>9} {:>9} {:>9}",
        "middleware", "answered", "requests", "total"
    );
    for row in resil_lab::interop::through_middleware().await? {
        println!(
            "{:<44} {:>6}/20 {:>9} {:>6} ms",
            row.label,
            row.answered,
            row.requests,
            row.total.as_millis()
        );
    }
    println!(
        "\nThe middleware retries the 503s after their Retry-After and hands back the last \
         response; with the breaker, no retry is sent into a provider that failed 5 times."
    );
    Ok(())
}
