//! How long can a caller wait? The worst case of a policy, computed by the same function
//! `#[resilient]` uses for the "Resilience" section of each function's docs.
//!
//! cargo run --example worst_case [-- --json]

use resil_lab::worst_case::cases;

fn main() {
    for case in cases() {
        if resil_lab::json_requested() {
            println!("{}", case.json());
        } else {
            println!(
                "{:<55} worst case {:>6.1} s   (the original: {})",
                case.policy,
                case.worst.as_secs_f64(),
                case.original
            );
        }
    }
}
