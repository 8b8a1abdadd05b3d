//! A call's operation frame under hostile use: what sees it (the body, the nested calls it
//! starts, listeners, the error's `Transient` methods), through panics, futures moved between
//! calls, `block_on` inside a body, many threads and carried operations; `hedges.rs` the same
//! through hedged races. First written by a hostile review of the frame published in place.

mod belonging;
mod hedges;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use resil_runtime::events::{Event, Listener};
use resil_runtime::{Operation, Policy, Rejected, Transient};
use tokio::time::sleep;

#[derive(Debug, Clone, PartialEq)]
enum Err {
    Busy,
    Rejected(String),
}

impl From<Rejected> for Err {
    fn from(r: Rejected) -> Self {
        Err::Rejected(r.to_string())
    }
}

/// Records `Operation::current()` wherever the library asks the error what it is.
static SEEN_IN_TRANSIENT: Mutex<Vec<Option<String>>> = Mutex::new(Vec::new());

#[derive(Debug, Clone, PartialEq)]
struct Spy;

impl From<Rejected> for Spy {
    fn from(_: Rejected) -> Self {
        Spy
    }
}

impl Transient for Spy {
    fn is_transient(&self) -> bool {
        let id = Operation::current().map(|o| o.id().to_string());
        SEEN_IN_TRANSIENT.lock().unwrap().push(id);
        true
    }
}

impl Transient for Err {
    fn is_transient(&self) -> bool {
        matches!(self, Err::Busy)
    }
}

fn id() -> String {
    Operation::current().unwrap().id().to_string()
}

/// Runs a call through `policy` whose body fails with `error`: its result, and the id its
/// body saw (the last attempt's).
async fn failing_call<E>(policy: &Policy, error: E) -> (Result<(), E>, Option<String>)
where
    E: Transient + From<Rejected> + Clone + Send + 'static,
{
    let body_id = Mutex::new(None);
    let r = policy
        .run(|| async {
            *body_id.lock().unwrap() = Some(id());
            Err(error.clone())
        })
        .await;
    (r, body_id.into_inner().unwrap())
}

// ---------------------------------------------------------------------------------------
// `Operation::current()` inside `Transient::is_transient`: the error is classified inside its
// call, whose frame is published for the whole poll of an attempt.
// ---------------------------------------------------------------------------------------
#[tokio::test(start_paused = true)]
async fn is_transient_runs_inside_its_call() {
    let policy = Policy::builder()
        .retry(1)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap();
    let (r, body_id) = failing_call(&policy, Spy).await;
    assert!(r.is_err());
    let seen = SEEN_IN_TRANSIENT.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for s in &seen {
        assert_eq!(
            s, &body_id,
            "is_transient sees the operation of the call it classifies"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A listener hearing `BreakerTransition` (emitted inside the attempt's poll, right after the
// body's failure, not through the events every call sends) sees the call's operation.
// ---------------------------------------------------------------------------------------
#[derive(Debug, Default)]
struct TransitionSpy(Mutex<Vec<(String, Option<String>)>>);

impl Listener for TransitionSpy {
    fn on_event(&self, event: &Event<'_>) {
        let kind = match event {
            Event::BreakerTransition { .. } => "transition",
            Event::AttemptEnded { .. } => "ended",
            _ => return,
        };
        let current = Operation::current().map(|o| o.id().to_string());
        self.0.lock().unwrap().push((kind.to_owned(), current));
    }
}

#[tokio::test(start_paused = true)]
async fn a_listener_hearing_the_breaker_open_sees_the_call() {
    let spy = Arc::new(TransitionSpy::default());
    let policy = Policy::builder()
        .breaker_named("frames-transition", 1, Duration::from_secs(30))
        .listener(spy.clone())
        .build()
        .unwrap();
    let (r, body_id) = failing_call(&policy, Err::Busy).await;
    assert_eq!(r, Err(Err::Busy));
    let seen = spy.0.lock().unwrap().clone();
    assert!(seen.iter().any(|(k, _)| k == "transition"), "{seen:?}");
    for (kind, current) in &seen {
        assert_eq!(
            current, &body_id,
            "{kind}: listener sees the call's operation"
        );
    }
}

// A panic inside a listener (the frame is published around it) unwinds cleanly.
#[derive(Debug)]
struct Panics;
impl Listener for Panics {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::AttemptStarted { .. } = event {
            assert!(Operation::current().is_some());
            panic!("listener panics");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_listener_leaves_nothing_published() {
    use futures::FutureExt;
    let outer = Policy::builder().build().unwrap();
    let policy = Policy::builder()
        .listener(Arc::new(Panics))
        .build()
        .unwrap();
    let caught = std::panic::AssertUnwindSafe(
        outer.run(|| async { policy.run(|| async { Ok::<_, Err>(()) }).await }),
    )
    .catch_unwind()
    .await;
    assert!(caught.is_err());
    assert!(Operation::current().is_none());
}

// A listener that makes a resilient call of its own, here when a retry starts: its call is an
// operation of its own, and takes no number among the body's nested calls, so the charge a
// retried body makes again keeps its idempotency key.
#[derive(Debug)]
struct AuditsRetries {
    audit: Policy,
    ids: Mutex<Vec<String>>,
}

impl Listener for AuditsRetries {
    fn on_event(&self, event: &Event<'_>) {
        use futures::FutureExt;
        if let Event::AttemptStarted { attempt: 1.., .. } = event {
            let audited = self.audit.run(|| async { Ok::<_, Err>(id()) });
            let audited = audited.now_or_never().unwrap().unwrap();
            self.ids.lock().unwrap().push(audited);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_listeners_call_takes_no_number_among_the_bodys_nested_calls() {
    let audits = Arc::new(AuditsRetries {
        audit: Policy::builder().build().unwrap(),
        ids: Mutex::default(),
    });
    let outer = Policy::builder()
        .retry(1)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .listener(audits.clone())
        .build()
        .unwrap();
    let charge = Policy::builder().build().unwrap();
    let keys = Mutex::new(Vec::new());
    let outer_id = outer
        .run(|| async {
            let key = charge.run(|| async { Ok::<_, Err>(id()) }).await?;
            let mut keys = keys.lock().unwrap();
            keys.push(key);
            if keys.len() == 1 {
                return Err(Err::Busy);
            }
            Ok(id())
        })
        .await
        .unwrap();
    let charged = format!("{outer_id}.1");
    assert_eq!(
        *keys.lock().unwrap(),
        [charged.as_str(), &charged],
        "one key per charge"
    );
    let audited = audits.ids.lock().unwrap().clone();
    assert_eq!(audited.len(), 1);
    assert!(
        !audited[0].starts_with(&outer_id),
        "the listener's call is its own operation: {audited:?}"
    );
}

// A learning call that retries, polled from a thread-local's destructor after the runtime's
// thread-locals (and rand's) are gone: it runs, rather than panicking there, which aborts the
// process (so the test runs in a child process).
#[test]
fn a_learning_call_polled_from_a_thread_locals_destructor_runs() {
    use std::cell::RefCell;
    use std::sync::atomic::AtomicBool;
    const CHILD: &str = "RESIL_FRAMES_DESTRUCTOR_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_learning_call_polled_from_a_thread_locals_destructor_runs",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    static RAN: AtomicBool = AtomicBool::new(false);
    /// A learning call that fails once and retries, on a runtime of its own.
    fn learning_call(policy: &Policy) -> Result<(), Err> {
        use resil_runtime::{operation, ProviderLimits, Quota};
        let said = Quota {
            limit: Some(10),
            remaining: 9,
            reset: Duration::from_secs(1),
            window: None,
        };
        let attempts = AtomicU32::new(0);
        let call = policy.run(|| async {
            operation::report_limits(ProviderLimits {
                requests: Some(said),
                tokens: None,
            });
            match attempts.fetch_add(1, Ordering::SeqCst) {
                0 => Err(Err::Busy),
                // Its id read, as a call naming its request does.
                _ => {
                    assert!(!id().is_empty());
                    Ok(())
                }
            }
        });
        paused_runtime().block_on(call)
    }
    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }
    struct Late(Arc<Policy>);
    impl Drop for Late {
        fn drop(&mut self) {
            assert_eq!(learning_call(&self.0), Ok(()));
            RAN.store(true, Ordering::SeqCst);
        }
    }
    thread_local! {
        static LATE: RefCell<Option<Late>> = const { RefCell::new(None) };
    }
    std::thread::spawn(|| {
        let policy = Policy::builder().rate_learn().retry(1).build();
        let policy = Arc::new(policy.unwrap());
        // Tokio's thread-locals first, then `LATE`, then the call's: destroyed in the
        // opposite order, the call's are gone when `LATE` is dropped, and tokio's are not.
        paused_runtime().block_on(async {});
        LATE.with(|late| *late.borrow_mut() = Some(Late(policy.clone())));
        assert_eq!(learning_call(&policy), Ok(()));
    })
    .join()
    .unwrap();
    assert!(RAN.load(Ordering::SeqCst));
}

// ---------------------------------------------------------------------------------------
// A call's future started (first polled) inside A's body, then finished inside B's body;
// a Scoped future polled inside another call's body; block_on inside a body.
// ---------------------------------------------------------------------------------------
struct PollOnce<'a, F>(Pin<&'a mut F>);
impl<F: Future> Future for PollOnce<'_, F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(match self.0.as_mut().poll(cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_moved_between_operations_keeps_its_id() {
    let a = Policy::builder().retry(3).build().unwrap();
    let b = Policy::builder().retry(3).build().unwrap();
    let inner = Policy::builder().build().unwrap();
    let moved = Box::pin(inner.run(|| async {
        let first = id();
        sleep(Duration::from_millis(10)).await;
        Ok::<_, Err>((first, id()))
    }));
    let moved = Arc::new(tokio::sync::Mutex::new(Some(moved)));
    let a_id: String = a
        .run(|| {
            let moved = moved.clone();
            async move {
                let mut guard = moved.lock().await;
                let f = guard.as_mut().unwrap();
                assert!(PollOnce(f.as_mut()).await.is_none());
                Ok::<_, Err>(id())
            }
        })
        .await
        .unwrap();
    let (first, second) = b
        .run(|| {
            let moved = moved.clone();
            async move {
                let f = moved.lock().await.take().unwrap();
                let r = f.await?;
                Ok::<_, Err>(r)
            }
        })
        .await
        .unwrap();
    assert_eq!(first, format!("{a_id}.1"));
    assert_eq!(second, first);
}

#[tokio::test(start_paused = true)]
async fn a_scoped_future_polled_inside_another_call() {
    let a = Policy::builder().build().unwrap();
    let b = Policy::builder().build().unwrap();
    let inner = Policy::builder().build().unwrap();
    let captured = a
        .run(|| async { Ok::<_, Err>(Operation::current().unwrap()) })
        .await
        .unwrap();
    let a_id = captured.id().to_string();
    let scoped = captured.scope(async {
        let here = id();
        let nested = inner.run(|| async { Ok::<_, Err>(id()) }).await.unwrap();
        sleep(Duration::from_millis(5)).await;
        (here, nested, id())
    });
    let scoped = Mutex::new(Some(Box::pin(scoped)));
    let (b_id, (here, nested, after)) = b
        .run(|| async {
            let b_id = id();
            let f = scoped.lock().unwrap().take().unwrap();
            let r = f.await;
            assert_eq!(id(), b_id);
            Ok::<_, Err>((b_id, r))
        })
        .await
        .unwrap();
    assert_ne!(a_id, b_id);
    assert_eq!(here, a_id);
    assert_eq!(after, a_id);
    assert_eq!(nested, format!("{a_id}.1"));
}

#[test]
fn block_on_inside_a_body_nests() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let outer = Policy::builder().build().unwrap();
    let inner = Policy::builder().build().unwrap();
    let (o, n) = rt
        .block_on(outer.run(|| async {
            let n = futures::executor::block_on(inner.run(|| async { Ok::<_, Err>(id()) }))?;
            Ok::<_, Err>((id(), n))
        }))
        .unwrap();
    assert_eq!(n, format!("{o}.1"));
    assert!(Operation::current().is_none());
}

// Many tasks on a multi-thread runtime, nesting three deep with yields: each body sees its own
// id before and after every await.
#[test]
fn multi_thread_nesting_is_consistent() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let outer = Arc::new(Policy::builder().retry(2).build().unwrap());
        let mid = Arc::new(Policy::builder().retry(2).build().unwrap());
        let inner = Arc::new(Policy::builder().retry(2).build().unwrap());
        let mut tasks = Vec::new();
        for _ in 0..if cfg!(miri) { 2 } else { 64 } {
            let (outer, mid, inner) = (outer.clone(), mid.clone(), inner.clone());
            tasks.push(tokio::spawn(async move {
                outer
                    .run(|| {
                        let (mid, inner) = (mid.clone(), inner.clone());
                        async move {
                            let o = id();
                            tokio::task::yield_now().await;
                            assert_eq!(id(), o);
                            for k in 1..=2 {
                                let m = mid
                                    .run(|| {
                                        let inner = inner.clone();
                                        async move {
                                            let m = id();
                                            tokio::task::yield_now().await;
                                            let i = inner
                                                .run(|| async {
                                                    let i = id();
                                                    tokio::task::yield_now().await;
                                                    assert_eq!(id(), i);
                                                    Ok::<_, Err>(i)
                                                })
                                                .await?;
                                            assert_eq!(i, format!("{m}.1"));
                                            assert_eq!(id(), m);
                                            Ok::<_, Err>(m)
                                        }
                                    })
                                    .await?;
                                assert_eq!(m, format!("{o}.{k}"));
                                assert_eq!(id(), o);
                            }
                            Ok::<_, Err>(())
                        }
                    })
                    .await
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    });
}

// A nested call opens its breaker: the listener hearing the transition sees the nested
// call's operation, whose failure opened it, not its parent's.
#[tokio::test(start_paused = true)]
async fn a_nested_breaker_opening_is_heard_as_the_nested_calls() {
    let spy = Arc::new(TransitionSpy::default());
    let outer = Policy::builder().build().unwrap();
    let inner = Policy::builder()
        .breaker_named("frames-nested-transition", 1, Duration::from_secs(30))
        .listener(spy.clone())
        .build()
        .unwrap();
    let inner_id = Arc::new(Mutex::new(None));
    let _: Result<(), Err> = outer
        .run(|| async {
            inner
                .run(|| async {
                    *inner_id.lock().unwrap() = Some(id());
                    Err(Err::Busy)
                })
                .await
        })
        .await;
    let inner_id = inner_id.lock().unwrap().clone();
    let seen = spy.0.lock().unwrap().clone();
    let transition = seen.iter().find(|(k, _)| k == "transition").unwrap();
    assert_eq!(transition.1, inner_id, "{seen:?}");
}

fn assert_sync<T: Sync>(_: &T) {}
fn assert_send<T: Send>(_: &T) {}

// Compile-time: the future of `Policy::run` stays `Send`, and `Operation::scope`'s `Send +
// Sync` when the body's is (a frame changes only through atomics).
#[tokio::test(start_paused = true)]
async fn futures_are_send_and_a_scoped_one_sync() {
    let policy = Policy::builder().retry(1).build().unwrap();
    let f = policy.run(|| async { Ok::<_, Err>(Operation::current().unwrap()) });
    assert_send(&f);
    let scoped = f.await.unwrap().scope(async {});
    assert_send(&scoped);
    assert_sync(&scoped);
    scoped.await;
}

// Learning gates hear only their own body's reports, by depth, through a Scoped and a hedge:
// the parent's report, made before its nested calls run, is still the parent's when its poll
// ends (one cell for every depth would lose it to the learning child, or give it the child's).
#[tokio::test(start_paused = true)]
async fn nested_learning_calls_hear_only_their_own_bodies() {
    use resil_runtime::{operation, ProviderLimits, Quota};
    let said = |reset: u64| ProviderLimits {
        requests: Some(Quota {
            limit: Some(10),
            remaining: 0,
            reset: Duration::from_secs(reset),
            window: None,
        }),
        tokens: None,
    };
    let parent = Policy::builder()
        .rate_learn()
        .retry(1)
        .hedge(1, Duration::from_millis(50))
        .build()
        .unwrap();
    let child = Policy::builder().rate_learn().build().unwrap();
    let plain = Policy::builder().build().unwrap();
    let n = AtomicU32::new(0);
    let r: Result<(), Rejected> = parent
        .run(|| {
            let me = n.fetch_add(1, Ordering::SeqCst);
            let (child, plain) = (&child, &plain);
            async move {
                // The parent's own report: reset in 5 s.
                operation::report_limits(said(5));
                // A non-learning nested call reports: nobody hears it.
                plain
                    .run(|| async {
                        operation::report_limits(said(7));
                        Ok::<_, Rejected>(())
                    })
                    .await?;
                // A carried operation inside the body reports: nobody hears it.
                let op = Operation::current().unwrap();
                op.scope(async { operation::report_limits(said(9)) }).await;
                // A learning nested call hears its own.
                child
                    .run(|| async {
                        operation::report_limits(said(3));
                        sleep(Duration::from_millis(10)).await;
                        Ok::<_, Rejected>(())
                    })
                    .await?;
                sleep(Duration::from_millis(if me == 0 { 500 } else { 100 })).await;
                Ok(())
            }
        })
        .await;
    assert_eq!(r, Ok(()));
    let child_wait = child.rate_gate().unwrap().reserve(1, None).unwrap();
    assert!(
        child_wait > Duration::from_secs(2) && child_wait <= Duration::from_secs(3),
        "{child_wait:?}"
    );
    // The hedge's report (at 50 ms, the call over at 160 ms) said the reset was 5 s away: not
    // 3 (the child's), 7 or 9 (the non-learning calls'), nor nothing.
    let parent_wait = parent.rate_gate().unwrap().reserve(1, None).unwrap();
    assert!(
        parent_wait > Duration::from_secs(4) && parent_wait <= Duration::from_secs(5),
        "the parent heard its own body only: {parent_wait:?}"
    );
}
