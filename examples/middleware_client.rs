//! A `reqwest_middleware` client against the mock provider on 127.0.0.1 during an outage
//! (every completion answers 503 with `Retry-After: 1`): 20 callers through no policy, a
//! retrying `resil::middleware::PolicyMiddleware`, and a retrying one with a breaker; the
//! requests the provider saw. Real time: about 5 seconds.
//!
//! cargo run --example middleware_client

#[tokio::main]
async fn main() -> std::io::Result<()> {
    resil_lab::interop::print(
        "middleware",
        &resil_lab::interop::through_middleware().await?,
    );
    println!(
        "\nThe middleware retries the 503s after their Retry-After and hands back the last \
         response; with the breaker, no retry is sent into a provider that failed 5 times."
    );
    Ok(())
}
