//! A streamed chat completion against a mock provider on 127.0.0.1 (started and stopped by
//! this program): time to the first token streamed vs blocking, then each way a stream fails
//! and what its consumer saw. Real time: about 5 seconds.
//!
//! cargo run --example streaming [-- --json]

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let runs = resil_lab::streaming::run().await?;
    if resil_lab::print_json(&runs, resil_lab::streaming::Run::json) {
        return Ok(());
    }
    let ms = |d: Option<std::time::Duration>| {
        d.map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()))
    };
    println!("the same answer, 20 tokens 40 ms apart:");
    for run in &runs[..2] {
        println!(
            "  {:<9} first token after {:>7}, whole answer after {:>7}",
            run.name,
            ms(run.first_token),
            ms(Some(run.total))
        );
    }
    println!("\nwhen the stream fails (first item within 300 ms, idle 300 ms, 2 retries before the first item):");
    for run in &runs[2..] {
        println!("  {}", run.name);
        println!(
            "    consumer saw: {}\n    provider: {} requests, {} × 429; {} in all",
            run.saw(),
            run.provider.requests,
            run.provider.rate_limited,
            ms(Some(run.total))
        );
    }
    Ok(())
}
