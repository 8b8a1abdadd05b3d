//! The `profiles` example's figures, as the README states them (paused clock, no wall time):
//! one flaky provider behind each built-in profile.

use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn each_profile_does_what_the_readme_says_with_a_flaky_provider() {
    let rows = resil_lab::profiles::run().await;
    let row = |profile: &str| rows.iter().find(|row| row.profile == profile).unwrap();
    let figures = |profile: &str| {
        let row = row(profile);
        (row.answered, row.calls, row.trips)
    };
    assert_eq!(
        figures("idempotent"),
        (35, 74, 0),
        "answers 35 of 40, calls 74 times"
    );
    let waited = row("idempotent").waited;
    assert!(
        (Duration::from_secs(30)..=Duration::from_secs(50)).contains(&waited),
        "waits about 40 s (its jitter draws vary): {waited:?}"
    );
    for profile in ["llm", "payment", "external_api"] {
        let (answered, calls, trips) = figures(profile);
        assert_eq!(trips, 1, "{profile} trips its breaker");
        assert!(
            (18..=20).contains(&calls),
            "{profile} spares the provider: {calls} calls"
        );
        assert_eq!(answered, 12, "{profile} at the price of answers");
    }
    let fast = row("fast").worst_case.unwrap();
    assert!(
        rows.iter()
            .all(|row| row.worst_case.is_none_or(|worst| worst >= fast)),
        "fast gives up soonest: {rows:?}"
    );
}
