//! A call belongs to the operation it was first polled in, wherever it is polled later: its
//! retries, its attempt count and the breakers it goes through as part of its parent are read
//! from the frames of its own operation, never from those of another call's body that happens
//! to poll it (request coalescing, a call moved between tasks, a carried operation).

use futures::future::FutureExt;

use resil_runtime::Jitter;

use super::*;

/// Retries `retry` times after exactly `wait`.
fn retrying(retry: u32, wait: Duration) -> resil_runtime::PolicyBuilder {
    Policy::builder()
        .retry(retry)
        .backoff(wait, wait)
        .jitter(Jitter::None)
}

/// Polls `future` once, where it is, and leaves it pending.
async fn poll_once<F: Future + Unpin>(future: &mut F) {
    assert!(PollOnce(Pin::new(future)).await.is_none(), "still pending");
}

// A shared call (one request for several callers) first polled in operation A's body, and
// later by B's: its nested call's retry, made while B polls it, is A's operation's (A owns
// the allowance, not published now: the call's own count governs), and neither spends B's
// only retry nor counts as B's attempt.
#[tokio::test(start_paused = true)]
async fn a_coalesced_calls_retry_spends_nothing_of_the_operation_polling_it() {
    let a = retrying(1, Duration::from_millis(1)).build().unwrap();
    let b = retrying(1, Duration::from_millis(1)).build().unwrap();
    let shared_policy = Policy::builder().build().unwrap();
    let nested = retrying(1, Duration::from_millis(10)).build().unwrap();
    let calls = AtomicU32::new(0);
    let shared = shared_policy
        .run(|| async {
            nested
                .run(|| async {
                    sleep(Duration::from_millis(5)).await;
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0 => Err(Err::Busy),
                        _ => Ok(()),
                    }
                })
                .await
        })
        .boxed()
        .shared();
    a.run(|| {
        let mut mine = shared.clone();
        async move {
            // The nested call's first attempt starts, and fails 5 ms later.
            poll_once(&mut mine).await;
            Ok::<_, Err>(())
        }
    })
    .await
    .unwrap();
    let seen = b
        .run(|| {
            let mine = shared.clone();
            async move {
                mine.await?;
                let operation = Operation::current().unwrap();
                Ok::<_, Err>((operation.retries_left(), operation.attempt()))
            }
        })
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the nested call retried");
    assert_eq!(seen, (Some(1), 0), "B's retry left, B's first attempt");
}

// The same shared call: its nested call's retry meets a breaker that opened during its
// backoff. B holds that breaker while its body polls the shared call, but the nested call is
// not part of B's call: it is refused, as it would be anywhere else.
#[tokio::test(start_paused = true)]
async fn a_coalesced_call_does_not_pass_a_breaker_the_operation_polling_it_holds() {
    let breaker =
        || Policy::builder().breaker_named("frames-coalesced", 2, Duration::from_secs(30));
    let a = Policy::builder().build().unwrap();
    let b = breaker().build().unwrap();
    let other = breaker().build().unwrap();
    let shared_policy = Policy::builder().build().unwrap();
    let nested = breaker()
        .retry(1)
        .backoff(Duration::from_millis(10), Duration::from_millis(10))
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let shared = shared_policy
        .run(|| async {
            nested
                .run(|| async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err::<(), _>(Err::Busy)
                })
                .await
        })
        .boxed()
        .shared();
    a.run(|| {
        let mut mine = shared.clone();
        async move {
            // The nested call's first failure (1 of 2), then 10 ms of backoff.
            poll_once(&mut mine).await;
            Ok::<_, Err>(())
        }
    })
    .await
    .unwrap();
    let b_call = b.run(|| shared.clone());
    let opener = async {
        sleep(Duration::from_millis(5)).await;
        let r: Result<(), Err> = other.run(|| async { Err(Err::Busy) }).await;
        assert_eq!(r, Err(Err::Busy), "the second failure opens the breaker");
    };
    let (seen, ()) = tokio::join!(b_call, opener);
    assert_eq!(seen, Err(Err::Busy));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the retry is refused by the open breaker"
    );
}

// A call first polled outside any call is an operation of its own: finished inside a host's
// body, its retries are not the host's attempts.
#[tokio::test(start_paused = true)]
async fn a_call_first_polled_alone_and_finished_in_a_host_counts_its_retries_apart() {
    let host = retrying(1, Duration::from_millis(1)).build().unwrap();
    let alone = retrying(2, Duration::from_millis(1)).build().unwrap();
    let calls = AtomicU32::new(0);
    let mut call = Box::pin(alone.run(|| async {
        sleep(Duration::from_millis(1)).await;
        match calls.fetch_add(1, Ordering::SeqCst) {
            0 | 1 => Err(Err::Busy),
            _ => Ok(()),
        }
    }));
    poll_once(&mut call).await;
    let call = Mutex::new(Some(call));
    let attempts = host
        .run(|| async {
            let call = call.lock().unwrap().take();
            match call {
                Some(call) => {
                    call.await?;
                    Err(Err::Busy)
                }
                None => Ok(Operation::current().unwrap().attempt()),
            }
        })
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(attempts, 1, "the host's own retry, not the call's two");
}

// A carried operation polled inside another call's body sees the operation it carries: its
// attempt and retries, not the polling call's.
#[tokio::test(start_paused = true)]
async fn a_carried_operation_polled_inside_a_call_sees_only_what_it_carries() {
    let a = Policy::builder().build().unwrap();
    let b = retrying(2, Duration::from_millis(1)).build().unwrap();
    let captured = a
        .run(|| async { Ok::<_, Err>(Operation::current().unwrap()) })
        .await
        .unwrap();
    let scoped = captured.scope(async {
        let operation = Operation::current().unwrap();
        (operation.attempt(), operation.retries_left())
    });
    let scoped = Mutex::new(Some(scoped));
    let seen = b
        .run(|| async {
            if Operation::current().unwrap().attempt() == 0 {
                return Err(Err::Busy);
            }
            let scoped = scoped.lock().unwrap().take().unwrap();
            Ok::<_, Err>(scoped.await)
        })
        .await
        .unwrap();
    assert_eq!(seen, (0, None), "A's attempt, and A declared no retries");
}
