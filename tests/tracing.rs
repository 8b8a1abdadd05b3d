//! Feature `tracing`: an operation is a span `resil.operation`, each attempt a child span
//! `resil.attempt`, and the body's own spans nest under the attempt that ran them.
#![cfg(feature = "tracing")]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use resil::resilient;
use support::{ApiError, Calls};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// One span as the recording layer saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    parent: Option<String>,
    fields: HashMap<String, String>,
}

/// Records every span (its name, its parent's name and its fields) and every event (its level
/// and fields, and the span it happened in).
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<HashMap<u64, Seen>>>, Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent())
            .map(|parent| parent.name().to_owned());
        let mut seen = Seen {
            name: attrs.metadata().name().to_owned(),
            parent,
            ..Seen::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        self.0.lock().unwrap().insert(id.into_u64(), seen);
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut seen = Seen {
            name: event.metadata().level().to_string(),
            parent: ctx.event_span(event).map(|span| span.name().to_owned()),
            ..Seen::default()
        };
        event.record(&mut Fields(&mut seen.fields));
        self.1.lock().unwrap().push(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(seen) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut seen.fields));
        }
    }
}

#[resilient(retry = 2, backoff = "1ms..1ms", jitter = "none")]
async fn flaky(calls: &Calls) -> Result<u32, ApiError> {
    let _body = tracing::info_span!("body").entered();
    if calls.add() == 1 {
        return Err(ApiError::Busy);
    }
    Ok(7)
}

#[tokio::test(start_paused = true)]
async fn spans_nest_operation_attempt_body() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let calls = Calls::default();
    assert_eq!(flaky(&calls).await, Ok(7));

    let spans: Vec<Seen> = recorder.0.lock().unwrap().values().cloned().collect();
    let named = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    let operations = named("resil.operation");
    assert_eq!(operations.len(), 1, "{spans:#?}");
    assert!(operations[0].fields["resil.fn"].ends_with("tracing::flaky"));
    assert!(operations[0].fields.contains_key("resil.id"));

    let mut attempts = named("resil.attempt");
    attempts.sort_by_key(|s| s.fields["attempt"].clone());
    assert_eq!(attempts.len(), 2);
    assert!(attempts
        .iter()
        .all(|a| a.parent.as_deref() == Some("resil.operation")));
    assert!(!attempts[0].fields.contains_key("http.request.resend_count"));
    assert_eq!(attempts[1].fields["http.request.resend_count"], "1");

    let bodies = named("body");
    assert_eq!(bodies.len(), 2);
    assert!(bodies
        .iter()
        .all(|b| b.parent.as_deref() == Some("resil.attempt")));
}

#[resilient(
    retry = 1,
    backoff = "1ms..1ms",
    breaker = "per_model",
    breaker_threshold = 1
)]
async fn dead(model: &str) -> Result<u32, ApiError> {
    let _ = model;
    Err(ApiError::Busy)
}

#[tokio::test(start_paused = true)]
async fn waits_transitions_and_rejections_are_events() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    assert_eq!(dead("gpt").await, Err(ApiError::Busy));
    let refused = dead("gpt").await;
    assert!(matches!(refused, Err(ApiError::Rejected(_))));

    let events = recorder.1.lock().unwrap().clone();
    let opened = events
        .iter()
        .find(|e| e.name == "WARN")
        .expect("a WARN event for the breaker");
    assert_eq!(opened.fields["breaker"], "model");
    assert_eq!(opened.fields["key"], "gpt");
    assert_eq!(opened.fields["from"], "closed");
    assert_eq!(opened.fields["to"], "open");
    assert_eq!(opened.parent.as_deref(), Some("resil.attempt"));
    let rejected = events
        .iter()
        .find(|e| e.name == "INFO")
        .expect("an INFO event for the rejection");
    assert_eq!(rejected.fields["kind"], "breaker_open");
    assert!(
        events.iter().all(|e| e.name != "DEBUG"),
        "the breaker opened on the first failure: no retry wait"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_wait_is_a_debug_event() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let calls = Calls::default();
    assert_eq!(flaky(&calls).await, Ok(7));
    let events = recorder.1.lock().unwrap().clone();
    let wait = events
        .iter()
        .find(|e| e.name == "DEBUG")
        .expect("a DEBUG wait");
    assert_eq!(wait.fields["wait_ms"], "1");
    assert_eq!(wait.fields["reason"], "backoff");
}

/// A shared store that does not answer is one WARN event per outage, naming the store and why.
#[cfg(feature = "redis")]
#[tokio::test(start_paused = true)]
async fn an_unreachable_shared_store_is_one_warn_event() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);

    let store = resil::shared::Redis::open("redis://127.0.0.1:1/")
        .await
        .unwrap();
    assert!(!store.is_available());
    // The store's task keeps trying (with backoff): still one event.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let events = recorder.1.lock().unwrap().clone();
    let warnings: Vec<_> = events
        .iter()
        .filter(|e| e.name == "WARN" && e.fields.contains_key("store"))
        .collect();
    assert_eq!(warnings.len(), 1, "{events:?}");
    assert_eq!(warnings[0].fields["store"], "redis://127.0.0.1:1/");
    assert!(!warnings[0].fields["reason"].is_empty());
}

/// What a call started by hand outside an operation sees when it is first polled inside one:
/// its id and its deadline.
async fn started_outside_polled_inside() -> (String, String, Option<std::time::Duration>) {
    use resil::execution::{Next, Outcome};
    use resil::{Operation, Policy, Rejected};
    let outer = Policy::builder()
        .deadline(std::time::Duration::from_secs(10))
        .build()
        .unwrap();
    let inner = Policy::builder().build().unwrap();
    let mut started = inner.execute::<Rejected>();
    let mut enclosing = outer.execute::<Rejected>();
    let next = enclosing
        .attempt(async {
            let outer_id = Operation::current().unwrap().id().to_string();
            let seen = started
                .attempt(async {
                    let inside = Operation::current().unwrap();
                    Ok::<_, Rejected>((inside.id().to_string(), inside.remaining()))
                })
                .await;
            match seen {
                Next::Done(Outcome::Completed(Ok((id, remaining)))) => {
                    Ok((outer_id, id, remaining))
                }
                other => panic!("{other:?}"),
            }
        })
        .await;
    match next {
        Next::Done(Outcome::Completed(Ok(seen))) => seen,
        other => panic!("{other:?}"),
    }
}

/// Whether a hand-started call is nested in the operation it is first polled in does not
/// depend on a subscriber: it joins at its first poll, traced or not.
#[tokio::test(start_paused = true)]
async fn a_call_started_by_hand_joins_the_operation_of_its_first_poll_traced_or_not() {
    let untraced = started_outside_polled_inside().await;
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let traced = {
        let _default = tracing::subscriber::set_default(subscriber);
        started_outside_polled_inside().await
    };
    for (outer, inner, remaining) in [&untraced, &traced] {
        assert_eq!(*inner, format!("{outer}.1"), "nested in the enclosing call");
        assert_eq!(*remaining, Some(std::time::Duration::from_secs(10)));
    }
    let ids: Vec<_> = (recorder.0.lock().unwrap().values())
        .filter(|seen| seen.name == "resil.operation")
        .map(|seen| seen.fields.get("resil.id").cloned())
        .collect();
    assert!(ids.contains(&Some(traced.1.clone())), "{ids:?}");
}

static HEDGED_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The first call takes 5 s, its hedge 100 ms.
#[resilient(timeout = "10s", retry = 1, hedge = "1 after 800ms")]
async fn hedged(prompt: &str) -> Result<String, ApiError> {
    let call = HEDGED_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    drop(tracing::info_span!("body", call).entered());
    tokio::time::sleep(std::time::Duration::from_millis(if call == 0 {
        5000
    } else {
        100
    }))
    .await;
    Ok(format!("{prompt} {call}"))
}

/// Each racer of a hedged call runs in a `resil.attempt` span of its own, the hedge's marked
/// `resil.hedge`, and the body's spans nest under it.
#[tokio::test(start_paused = true)]
async fn each_racers_body_runs_in_its_attempts_span() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    assert_eq!(hedged("hi").await, Ok("hi 1".to_owned()));
    let spans: Vec<Seen> = recorder.0.lock().unwrap().values().cloned().collect();
    let bodies: Vec<_> = spans.iter().filter(|s| s.name == "body").collect();
    assert_eq!(bodies.len(), 2, "{spans:#?}");
    assert!(bodies
        .iter()
        .all(|b| b.parent.as_deref() == Some("resil.attempt")));
    let mut attempts: Vec<_> = (spans.iter())
        .filter(|s| s.name == "resil.attempt")
        .map(|s| {
            (
                s.fields["attempt"].clone(),
                s.fields.get("resil.hedge").cloned(),
            )
        })
        .collect();
    attempts.sort();
    assert_eq!(
        attempts,
        [
            ("0".to_owned(), None),
            ("1".to_owned(), Some("true".to_owned()))
        ],
        "{spans:#?}"
    );
}
