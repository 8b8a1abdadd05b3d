//! The same flaky provider behind each built-in profile: 40 requests, one after another, to a
//! provider that answers in 200 ms, fails one call in five, and is down for its calls 15 to 44. What each profile makes of it: answers, calls,
//! time spent waiting, breaker trips, and the worst case its numbers allow. Then a
//! configuration file changes a function's timeout at run time, and the next call shows it.
//! On tokio's paused clock: no wall time.
//!
//! cargo run --example profiles [-- --json]

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let rows = resil_lab::profiles::run().await;
    if resil_lab::print_json(&rows, resil_lab::profiles::Row::json) {
        return;
    }
    println!("40 requests; the provider fails one call in five, and its calls 15 to 44\n");
    println!(
        "{:<13} {:>9} {:>6} {:>9} {:>6} {:>11}",
        "profile", "answered", "calls", "waited", "trips", "worst case"
    );
    for row in &rows {
        let worst = row.worst_case.map_or_else(
            || "unbounded".to_owned(),
            |worst| format!("{} s", worst.as_secs()),
        );
        println!(
            "{:<13} {:>6}/40 {:>6} {:>7} s {:>6} {:>11}",
            row.profile,
            row.answered,
            row.calls,
            row.waited.as_secs(),
            row.trips,
            worst
        );
    }
    for profile in resil::profiles::ALL {
        println!("\n{}: {}", profile.name, profile.doc);
    }
    let (before, after) = resil_lab::profiles::reconfigured()
        .await
        .expect("a temporary file can be written");
    println!(
        "\nA lookup under `fast` against a provider that never answers fails after {} s; \
         after resil.toml set its timeout to \"1s\" (resil::config::load, no restart), \
         the next call fails after {} s.",
        before.as_secs(),
        after.as_secs()
    );
}
