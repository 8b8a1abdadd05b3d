//! Timelines of a load run, recorded from the events seam and drawn with plotters: one row per
//! request, each attempt a bar coloured by how it ended (waits are the gaps between bars), a
//! request refused without a call a grey tick, and the breaker's state as a band above.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plotters::prelude::*;
use resil::events::{AttemptOutcome, Event, Listener};
use resil::{BreakerState, Rejected};
use tokio::time::Instant;

/// How an attempt ended, as the picture colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Answered.
    Ok,
    /// Cut by its timeout.
    Timeout,
    /// Failed (transient or permanent).
    Error,
    /// Throttled by the provider.
    Throttled,
    /// Refused by the runtime before or instead of a call (open breaker, full bulkhead...).
    Refused,
}

impl Mark {
    /// The colour of its bars.
    pub fn color(self) -> RGBColor {
        match self {
            Mark::Ok => RGBColor(0x2e, 0x7d, 0x32),
            Mark::Timeout => RGBColor(0xef, 0x6c, 0x00),
            Mark::Error => RGBColor(0xc6, 0x28, 0x28),
            Mark::Throttled => RGBColor(0x6a, 0x1b, 0x9a),
            Mark::Refused => RGBColor(0x75, 0x75, 0x75),
        }
    }

    /// The colour as SVG writes it: `#2E7D32`.
    pub fn hex(self) -> String {
        let RGBColor(r, g, b) = self.color();
        format!("#{r:02X}{g:02X}{b:02X}")
    }
}

/// One attempt (or refusal) of a request, in time since the recording began.
#[derive(Debug, Clone, Copy)]
pub struct Bar {
    /// When it began.
    pub start: Duration,
    /// When it ended.
    pub end: Duration,
    /// How.
    pub mark: Mark,
}

/// One request: its bars in order.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The policy's name.
    pub site: String,
    /// Its attempts and refusals.
    pub bars: Vec<Bar>,
}

/// What was recorded between two [`Timeline::take`]s.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    /// The requests, in the order they first did something.
    pub requests: Vec<Request>,
    /// Breaker transitions: when, which breaker, to what.
    pub breaker: Vec<(Duration, String, BreakerState)>,
    /// How long the recording lasted.
    pub span: Duration,
}

/// A listener that records timelines; install it with
/// `resil::events::add_global_listener` and [`Timeline::take`] what it saw.
#[derive(Debug)]
pub struct Timeline {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    origin: Instant,
    /// Operation id → its index in `requests`.
    index: HashMap<String, usize>,
    recording: Recording,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            state: Mutex::new(State {
                origin: Instant::now(),
                index: HashMap::new(),
                recording: Recording::default(),
            }),
        }
    }
}

impl Timeline {
    /// Everything recorded since the last take; the next recording starts now.
    pub fn take(&self) -> Recording {
        let mut state = self.state.lock().unwrap();
        let mut recording = std::mem::take(&mut state.recording);
        recording.span = state.origin.elapsed();
        state.origin = Instant::now();
        state.index.clear();
        recording
    }
}

impl State {
    fn request(&mut self, site: &str, operation: String) -> &mut Request {
        let requests = &mut self.recording.requests;
        let at = *self.index.entry(operation).or_insert_with(|| {
            requests.push(Request {
                site: site.to_owned(),
                bars: Vec::new(),
            });
            requests.len() - 1
        });
        &mut requests[at]
    }
}

impl Listener for Timeline {
    fn on_event(&self, event: &Event<'_>) {
        let mut state = self.state.lock().unwrap();
        let now = state.origin.elapsed();
        match event {
            Event::AttemptStarted {
                site,
                operation: Some(operation),
                ..
            } => state.request(site, operation.to_string()).bars.push(Bar {
                start: now,
                end: now,
                mark: Mark::Ok,
            }),
            Event::AttemptEnded {
                site,
                operation: Some(operation),
                outcome,
                ..
            } => {
                let mark = match outcome {
                    AttemptOutcome::Ok => Mark::Ok,
                    AttemptOutcome::Rejected(Rejected::Timeout { .. }) => Mark::Timeout,
                    AttemptOutcome::Throttled => Mark::Throttled,
                    AttemptOutcome::Rejected(_) => Mark::Refused,
                    // A racer that lost ends after the winner: the latest bar is not its own.
                    AttemptOutcome::Cancelled => return,
                    _ => Mark::Error,
                };
                if let Some(bar) = state.request(site, operation.to_string()).bars.last_mut() {
                    bar.end = now;
                    bar.mark = mark;
                }
            }
            Event::Rejected {
                site,
                operation: Some(operation),
                ..
            } => state.request(site, operation.to_string()).bars.push(Bar {
                start: now,
                end: now,
                mark: Mark::Refused,
            }),
            Event::BreakerTransition {
                breaker,
                transition,
            } => state
                .recording
                .breaker
                .push((now, (*breaker).to_owned(), transition.to)),
            _ => {}
        }
    }
}

const WIDTH: u32 = 640;
const ROW: u32 = 4;
const BAND: f64 = 4.0;

/// Draws `recording` as an SVG: one row per request (the first on top), the breaker's band
/// above them, time across in seconds.
pub fn svg(recording: &Recording, caption: &str) -> Result<String, String> {
    let rows = recording.requests.len().max(1) as f64;
    let seconds = recording.span.as_secs_f64().max(0.001);
    // A refusal takes no time: drawn as a tick a few pixels wide.
    let tick = seconds / f64::from(WIDTH) * 3.0;
    let height = recording.requests.len() as u32 * ROW + 140;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(36)
            .build_cartesian_2d(0.0..seconds, 0.0..rows + BAND + 1.0)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("seconds")
            .y_desc("request")
            .y_labels(0)
            .draw()
            .map_err(|e| e.to_string())?;
        // The breaker's band: closed until its first transition.
        let mut states = vec![(Duration::ZERO, BreakerState::Closed)];
        states.extend(recording.breaker.iter().map(|(at, _, to)| (*at, *to)));
        let band = states.iter().enumerate().map(|(i, (from, state))| {
            let until = states.get(i + 1).map_or(recording.span, |next| next.0);
            let color = match state {
                BreakerState::Closed => RGBColor(0xc8, 0xe6, 0xc9),
                BreakerState::HalfOpen => RGBColor(0xff, 0xf5, 0x9d),
                BreakerState::Open => RGBColor(0xff, 0xab, 0x91),
            };
            Rectangle::new(
                [
                    (from.as_secs_f64(), rows + 1.0),
                    (until.as_secs_f64(), rows + BAND),
                ],
                color.filled(),
            )
        });
        if !recording.breaker.is_empty() {
            chart.draw_series(band).map_err(|e| e.to_string())?;
        }
        let bars = recording
            .requests
            .iter()
            .enumerate()
            .flat_map(|(i, request)| {
                let y = rows - i as f64;
                request.bars.iter().map(move |bar| {
                    let end = bar.end.as_secs_f64().max(bar.start.as_secs_f64() + tick);
                    Rectangle::new(
                        [(bar.start.as_secs_f64(), y - 0.9), (end, y)],
                        bar.mark.color().filled(),
                    )
                })
            });
        chart.draw_series(bars).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// With `--svg FILE` on the command line: the file, and a timeline already listening to
/// every policy's events.
pub fn requested() -> Option<(PathBuf, Arc<Timeline>)> {
    let mut args = std::env::args().skip_while(|arg| arg != "--svg");
    args.next()?;
    let path = PathBuf::from(args.next()?);
    let timeline = Arc::new(Timeline::default());
    resil::events::add_global_listener(timeline.clone());
    Some((path, timeline))
}

/// The rows of a run recorded without a timeline.
pub fn rows<R>(recorded: Vec<(R, Option<Recording>)>) -> Vec<R> {
    recorded.into_iter().map(|(row, _)| row).collect()
}

/// With a file (`--svg`), draws each recorded row beside it, its name and caption from
/// `describe` (`storm.svg` and row `b` → `storm-b.svg`), and says so on stderr; then the rows.
pub fn draw<R>(
    path: Option<&Path>,
    recorded: Vec<(R, Option<Recording>)>,
    describe: impl Fn(&R) -> (String, String),
) -> std::io::Result<Vec<R>> {
    let mut rows = Vec::new();
    for (row, recording) in recorded {
        if let (Some(path), Some(recording)) = (path, recording) {
            let (name, caption) = describe(&row);
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let picture = svg(&recording, &caption).map_err(std::io::Error::other)?;
            let file = path.with_file_name(format!("{stem}-{name}.svg"));
            std::fs::write(&file, picture)?;
            eprintln!("wrote {}", file.display());
        }
        rows.push(row);
    }
    Ok(rows)
}
