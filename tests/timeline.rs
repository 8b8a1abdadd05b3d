//! The retry storm's timelines (`cargo run --example retry_storm -- --svg FILE`), drawn by
//! plotters and read back: one row per request, the bars coloured by outcome, the breaker's
//! band. Its own test binary: it adds a global listener.

use std::collections::BTreeSet;
use std::sync::Arc;

use resil_lab::retry_storm::run_recorded;
use resil_lab::timeline::{svg, Mark, Timeline};

/// The `y` of every `<rect>` filled with `color`, and how many such rects there are.
fn rects(picture: &str, color: &str) -> (BTreeSet<i64>, usize) {
    let fill = format!("fill=\"{color}\"");
    let mut rows = BTreeSet::new();
    let mut count = 0;
    for rect in picture.split("<rect ").skip(1) {
        let rect = &rect[..rect.find("/>").unwrap()];
        if !rect
            .to_ascii_uppercase()
            .contains(&fill.to_ascii_uppercase())
        {
            continue;
        }
        let y = rect.split("y=\"").nth(1).unwrap();
        rows.insert(y[..y.find('"').unwrap()].parse().unwrap());
        count += 1;
    }
    (rows, count)
}

#[tokio::test(start_paused = true)]
async fn one_row_per_request_and_the_breaker_above() {
    let timeline = Arc::new(Timeline::default());
    resil::events::add_global_listener(timeline.clone());
    let rows = run_recorded(Some(&timeline)).await;
    let recording = |name: &str| {
        let (row, recording) = rows.iter().find(|(row, _)| row.row == name).unwrap();
        (row, recording.clone().unwrap())
    };

    let (row, storm) = recording("b");
    let picture = svg(&storm, row.label).unwrap();
    let (lines, bars) = rects(&picture, &Mark::Timeout.hex());
    assert_eq!(lines.len(), 100, "one row per request");
    assert_eq!(bars, 300, "three timed-out attempts each");

    let (row, guarded) = recording("c");
    let picture = svg(&guarded, row.label).unwrap();
    let (timed_out, _) = rects(&picture, &Mark::Timeout.hex());
    let (refused, _) = rects(&picture, &Mark::Refused.hex());
    assert_eq!(timed_out.len() + refused.len(), 100, "one row per request");
    assert_eq!(
        refused.len(),
        90,
        "refused by the open breaker, without a call"
    );
    let (opened, _) = rects(&picture, "#FFAB91");
    assert_eq!(opened.len(), 1, "the band shows the breaker open");
}
