//! The fallback trap: the primary model answers 503, the backup is healthy, retry = 2 and
//! a breaker threshold of 5. One breaker shared by both models, or one per model?
//!
//! cargo run --example fallback_trap [-- --json] [-- --svg trap.svg]
//!
//! `--svg trap.svg` also draws each row's timeline (`trap-shared-sequential.svg`, ...): one
//! line per call of a model, as `retry_storm` draws them.

use resil_lab::fallback_trap::{run_recorded, ORIGINAL};
use resil_lab::timeline::{draw, requested};

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() -> std::io::Result<()> {
    let svg = requested();
    let recorded = run_recorded(svg.as_ref().map(|(_, timeline)| &**timeline)).await;
    let path = svg.as_ref().map(|(path, _)| path.as_path());
    let rows = draw(path, recorded, |row| {
        let breakers = row.json()["breakers"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let name = format!("{breakers}-{}", row.load);
        (name, format!("{breakers} breakers, {} users", row.load))
    })?;
    if resil_lab::print_json(&rows, resil_lab::fallback_trap::Row::json) {
        return Ok(());
    }
    println!("primary model always 503, backup healthy; retry = 2, breaker threshold 5");
    println!("10 sequential users, then 8 parallel users twice; each tries the primary, then the backup\n");
    println!(
        "{:<10} {:<11} {:>13} {:>13} {:>6} {:>9} {:>7}",
        "breakers", "load", "primary calls", "backup calls", "waits", "answered", "failed"
    );
    for row in &rows {
        println!(
            "{:<10} {:<11} {:>13} {:>13} {:>6} {:>9} {:>7}",
            row.json()["breakers"].as_str().unwrap_or_default(),
            row.load,
            row.primary_calls,
            row.backup_calls,
            row.waits,
            row.answered,
            row.failed
        );
    }
    println!("\nThe original: {ORIGINAL}.");
    println!(
        "With `breaker = \"per_model\"` the dead model is called 5 times in all, then cut off, \
         and every user is answered by the backup."
    );
    Ok(())
}
