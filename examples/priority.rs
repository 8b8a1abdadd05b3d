//! One `50/s` limit shared by a chat UI (critical), two users (default) and a backfill
//! (batch), against a mock provider on 127.0.0.1: the same calls served in arrival order, by
//! `priority = class`, and by `priority = class, fair = tenant`; how long each tenant's calls
//! waited for their slot. Real time: about 12 seconds.
//!
//! cargo run --example priority [-- --json]

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let rows = resil_lab::priority::run().await?;
    if resil_lab::print_json(&rows, resil_lab::priority::Row::json) {
        return Ok(());
    }
    let mut serving = None;
    for row in &rows {
        if serving != Some(row.serving) {
            serving = Some(row.serving);
            println!("\n{}", row.serving.name());
            println!(
                "  {:<12} {:<9} {:>9} {:>10} {:>10}",
                "tenant", "class", "answered", "wait p50", "wait p99"
            );
        }
        println!(
            "  {:<12} {:<9} {:>5}/{:<3} {:>7} ms {:>7} ms",
            row.tenant,
            row.class,
            row.answered,
            row.calls,
            row.p50.as_millis(),
            row.p99.as_millis()
        );
    }
    Ok(())
}
