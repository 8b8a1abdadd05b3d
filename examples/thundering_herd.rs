//! The thundering herd: clients against a server that serves 3 at once and answers 429 with
//! `Retry-After: 1`. No jitter, full jitter, and full jitter behind a client-side gate of 3,
//! over 3 seeds each.
//!
//! cargo run --example thundering_herd [-- --json] [-- --svg herd.svg]
//!
//! `--svg herd.svg` also draws each row's timeline (`herd-20-no_jitter-1.svg`, ...), as
//! `retry_storm` draws them: the 429s red, the answers green.

use resil_lab::thundering_herd::{run_recorded, ORIGINAL};
use resil_lab::timeline::{draw, requested};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> std::io::Result<()> {
    let svg = requested();
    let recorded = run_recorded(svg.as_ref().map(|(_, timeline)| &**timeline)).await;
    let path = svg.as_ref().map(|(path, _)| path.as_path());
    let rows = draw(path, recorded, |row| {
        let words = row.variant.name().split(|c: char| !c.is_alphanumeric());
        let pacing = words
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("_");
        let name = format!("{}-{pacing}-{}", row.clients, row.seed);
        let caption = format!(
            "{} clients, {}, seed {}",
            row.clients,
            row.variant.name(),
            row.seed
        );
        (name, caption)
    })?;
    if resil_lab::print_json(&rows, resil_lab::thundering_herd::Row::json) {
        return Ok(());
    }
    println!("server: 3 at once, 125 ms each, 429 + Retry-After: 1 beyond; every client sends one request\n");
    println!(
        "{:>7}  {:<24} {:>4} {:>9} {:>6} {:>9} {:>17}",
        "clients", "pacing", "seed", "requests", "429s", "total", "retries/client"
    );
    for row in &rows {
        println!(
            "{:>7}  {:<24} {:>4} {:>9} {:>6} {:>8.1}s {:>17.1}",
            row.clients,
            row.variant.name(),
            row.seed,
            row.requests,
            row.rejected,
            row.total.as_secs_f64(),
            row.retries_per_client
        );
    }
    println!("\nThe original: {ORIGINAL}.");
    println!(
        "resil adds the jitter on top of Retry-After (never under it), so clients told \
         \"1 second\" do not all come back in the same millisecond."
    );
    Ok(())
}
