//! Every attempt told as started is told as ended: one dropped while its call is under way
//! (its caller stopped waiting, or another racer won) ends `Cancelled`, with its own number
//! and its operation's id. On tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::TestError;
use resil_runtime::events::{AttemptOutcome, Event, Listener};
use resil_runtime::Policy;
use tokio::time::sleep;

/// An attempt's start or end: (a start, operation id, attempt, outcome).
type Told = (bool, Option<String>, u32, String);

/// Each attempt's start and end.
#[derive(Debug, Default)]
struct Ends(Mutex<Vec<Told>>);

impl Listener for Ends {
    fn on_event(&self, event: &Event<'_>) {
        let line = match event {
            Event::AttemptStarted {
                operation, attempt, ..
            } => (
                true,
                operation.map(|id| id.to_string()),
                *attempt,
                String::new(),
            ),
            Event::AttemptEnded {
                operation,
                attempt,
                outcome,
                ..
            } => (
                false,
                operation.map(|id| id.to_string()),
                *attempt,
                match outcome {
                    AttemptOutcome::Cancelled => "cancelled".to_owned(),
                    other => format!("{other:?}"),
                },
            ),
            _ => return,
        };
        self.0.lock().unwrap().push(line);
    }
}

impl Ends {
    /// The ends heard, each with whether its operation and number match a start heard.
    fn ends(&self) -> Vec<(u32, String, bool)> {
        let heard = self.0.lock().unwrap();
        let started = |id: &Option<String>, n: u32| {
            id.is_some() && heard.iter().any(|(s, i, a, _)| *s && i == id && *a == n)
        };
        (heard.iter())
            .filter(|(start, ..)| !start)
            .map(|(_, id, n, outcome)| (*n, outcome.clone(), started(id, *n)))
            .collect()
    }
}

#[tokio::test(start_paused = true)]
async fn an_operation_dropped_mid_call_tells_its_attempt_ended() {
    let ends = Arc::new(Ends::default());
    let policy = Policy::builder().listener(ends.clone()).build().unwrap();
    let call = policy.run(|| async {
        sleep(Duration::from_secs(5)).await;
        Ok::<u32, TestError>(1)
    });
    assert!(tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .is_err());
    assert_eq!(ends.ends(), [(0, "cancelled".to_owned(), true)]);
}

#[tokio::test(start_paused = true)]
async fn a_racer_that_lost_tells_its_attempt_ended() {
    let ends = Arc::new(Ends::default());
    let policy = Policy::builder()
        .retry(1)
        .hedge(1, Duration::from_secs(1))
        .listener(ends.clone())
        .build()
        .unwrap();
    let calls = Mutex::new(vec![10, 1]);
    let result = policy
        .run(|| {
            let secs = calls.lock().unwrap().remove(0);
            async move {
                sleep(Duration::from_secs(secs)).await;
                Ok::<u64, TestError>(secs)
            }
        })
        .await;
    assert_eq!(result, Ok(1), "the hedge wins");
    assert_eq!(
        ends.ends(),
        [
            (1, "Ok".to_owned(), true),
            (0, "cancelled".to_owned(), true)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_dropped_before_its_call_tells_nothing() {
    let ends = Arc::new(Ends::default());
    let policy = Policy::builder()
        .bulkhead(1)
        .bulkhead_queue(1)
        .listener(ends.clone())
        .build()
        .unwrap();
    let first = policy.run(|| async {
        sleep(Duration::from_secs(2)).await;
        Ok::<u32, TestError>(1)
    });
    let queued = tokio::time::timeout(
        Duration::from_secs(1),
        policy.run(|| async { Ok::<u32, TestError>(2) }),
    );
    let (first, queued) = tokio::join!(first, queued);
    assert_eq!(first, Ok(1));
    assert!(queued.is_err(), "dropped while queued");
    assert_eq!(ends.ends(), [(0, "Ok".to_owned(), true)]);
}
