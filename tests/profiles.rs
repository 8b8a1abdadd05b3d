//! The `profiles` example's figures, as the guide states them (`resil::guide::choosing_keys`) (paused clock, no wall time):
//! one flaky provider behind each built-in profile.

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
    // The policies are seeded: the jitter draws, and so the waits, repeat exactly.
    assert_eq!(
        row("idempotent").waited.as_millis(),
        39467,
        "waits about 40 s"
    );
    for (profile, calls) in [("llm", 18), ("payment", 18), ("external_api", 20)] {
        let row = row(profile);
        assert_eq!(row.trips, 1, "{profile} trips its breaker");
        assert_eq!(row.calls, calls, "{profile} spares the provider");
        assert_eq!(row.answered, 12, "{profile} at the price of answers");
    }
    let fast = row("fast").worst_case.unwrap();
    assert!(
        rows.iter()
            .all(|row| row.worst_case.is_none_or(|worst| worst >= fast)),
        "fast gives up soonest: {rows:?}"
    );
}
