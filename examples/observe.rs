//! A service on 127.0.0.1 whose handler calls an annotated client against the mock provider,
//! with `/metrics` (Prometheus text) and `/health` (every breaker, as JSON): what both show
//! before, during and after an outage of one model, and while an operator holds another open.
//! Real time: about 3 seconds.
//!
//! cargo run --example observe

#[tokio::main]
async fn main() -> std::io::Result<()> {
    for phase in resil_lab::observe::run().await? {
        println!(
            "== {} ({}/{} answered)",
            phase.name, phase.answered, phase.sent
        );
        println!("GET /health\n  {}", phase.health);
        println!("GET /metrics (resil_* series)");
        for line in &phase.metrics {
            println!("  {line}");
        }
        println!();
    }
    Ok(())
}
