//! Events: several listeners at once (global, per function by name, per function by
//! attribute), with the attempt's duration and the error's classification. Its own test
//! binary: it adds global listeners.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use resil::events::{self, AttemptOutcome, Event, Listener};
use resil::{resilient, Rejected, Transient};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Transient)]
enum Error {
    #[error("too fast")]
    #[transient(throttle)]
    Throttled,
    #[error("down")]
    #[transient]
    Down,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

/// Keeps one line per attempt's end, tagged with the listener's name.
#[derive(Debug)]
struct Lines(&'static str, Mutex<Vec<String>>);

impl Lines {
    const fn new(name: &'static str) -> Self {
        Lines(name, Mutex::new(Vec::new()))
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.1.lock().unwrap())
    }
}

impl Listener for Lines {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::AttemptEnded {
            site,
            attempt,
            outcome,
            elapsed,
            ..
        } = event
        {
            let outcome = match outcome {
                AttemptOutcome::Ok => "ok",
                AttemptOutcome::Throttled => "throttled",
                AttemptOutcome::Transient => "transient",
                _ => "other",
            };
            let site = site.rsplit("::").next().unwrap_or(site);
            self.1.lock().unwrap().push(format!(
                "{} {site} #{attempt} {outcome} {}ms",
                self.0,
                elapsed.as_millis()
            ));
        }
    }
}

static AUDIT: Lines = Lines::new("audit");

#[resilient(retry = 2, backoff = "10ms..10ms", listener = AUDIT)]
async fn audited(failures: &Mutex<Vec<Error>>) -> Result<(), Error> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    match failures.lock().unwrap().pop() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

#[resilient(retry = 1)]
async fn plain() -> Result<(), Error> {
    tokio::time::sleep(Duration::from_millis(40)).await;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn every_listener_hears_what_is_his() {
    let first = Arc::new(Lines::new("first"));
    let second = Arc::new(Lines::new("second"));
    let named = Arc::new(Lines::new("named"));
    events::add_global_listener(first.clone());
    events::add_global_listener(second.clone());
    events::add_listener_for("listeners::plain", named.clone());

    let failures = Mutex::new(vec![Error::Down, Error::Throttled]);
    assert_eq!(audited(&failures).await, Ok(()));
    assert_eq!(plain().await, Ok(()));

    let audited_lines = |who: &str| {
        vec![
            format!("{who} audited #0 throttled 100ms"),
            format!("{who} audited #1 transient 100ms"),
            format!("{who} audited #2 ok 100ms"),
        ]
    };
    assert_eq!(
        AUDIT.take(),
        audited_lines("audit"),
        "the attribute's listener"
    );
    let mut expected = audited_lines("first");
    expected.push("first plain #0 ok 40ms".into());
    assert_eq!(
        first.take(),
        expected,
        "a global listener hears every function"
    );
    assert_eq!(second.take().len(), 4, "and so does a second one");
    assert_eq!(
        named.take(),
        ["named plain #0 ok 40ms"],
        "a listener by name hears its function only"
    );
}
