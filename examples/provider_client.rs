//! A reqwest client made resilient with one attribute per method, against a hostile mock
//! provider on 127.0.0.1 (started and stopped by this program). Real time: about 3 seconds.
//!
//! cargo run --example provider_client [-- --json]

use resil::Transient;
use resil_lab::client::tour;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let steps = tour().await?;
    for step in steps {
        let last = step.results.last().expect("every step has a caller");
        let outcome = match last {
            Ok(completion) => format!(
                "ok on attempt {}: {:?}",
                completion.attempt,
                completion.text.trim()
            ),
            Err(error) => format!(
                "{} error: {error}",
                if error.is_transient() {
                    "transient"
                } else {
                    "permanent"
                }
            ),
        };
        let ok = step.results.iter().filter(|r| r.is_ok()).count();
        if resil_lab::json_requested() {
            println!(
                "{}",
                resil_lab::mock::step_json(
                    step.name,
                    ok,
                    step.results.len(),
                    step.elapsed,
                    step.provider
                )
            );
            continue;
        }
        println!("{}", step.name);
        println!(
            "  {ok}/{} answered in {} ms; provider: {} requests, {} generations billed, {} replays, {} × 429",
            step.results.len(),
            step.elapsed.as_millis(),
            step.provider.requests,
            step.provider.generations,
            step.provider.replays,
            step.provider.rate_limited
        );
        println!("  last caller: {outcome}\n");
    }
    Ok(())
}
