//! The resilient reqwest client against the hostile mock provider, over loopback and real
//! time (about 3 s): what each failure costs in requests, generations and replays.

use std::time::Duration;

use resil::{Rejected, Transient};
use resil_lab::client::{tour, ClientError};

#[tokio::test]
async fn the_client_against_the_hostile_provider() {
    let steps = tour().await.unwrap();
    let step = |name: &str| steps.iter().find(|s| s.name.starts_with(name)).unwrap();

    let hang = step("hang");
    assert!(matches!(
        hang.results[0],
        Err(ClientError::Rejected(Rejected::Timeout { after })) if after == Duration::from_millis(300)
    ));
    assert_eq!(
        hang.provider.requests, 3,
        "first attempt and 2 retries, each cut at 300 ms"
    );

    let unauthorized = step("401");
    assert!(
        matches!(&unauthorized.results[0], Err(e @ ClientError::Status { status, .. }) if status.as_u16() == 401 && !e.is_transient())
    );
    assert_eq!(unauthorized.provider.requests, 1, "a 401 is not retried");

    let busy = step("5 at once");
    assert!(busy.results.iter().all(Result::is_ok));
    assert_eq!(
        (busy.provider.rate_limited, busy.provider.generations),
        (2, 5)
    );
    assert!(
        busy.elapsed >= Duration::from_secs(1),
        "the 429s waited out Retry-After: {:?}",
        busy.elapsed
    );

    let idempotent = step("timeout, retry");
    let completion = idempotent.results[0].as_ref().unwrap();
    assert_eq!(completion.attempt, 1, "the first attempt timed out");
    assert_eq!(completion.text, "token0 token1 token2 token3 token4 ");
    assert_eq!(
        (idempotent.provider.generations, idempotent.provider.replays),
        (1, 1),
        "billed once"
    );

    for cut in ["stream reset", "stream closed"] {
        let cut = step(cut);
        let error = cut.results[0].as_ref().unwrap_err();
        assert!(error.is_transient(), "{error}");
        assert_eq!(cut.provider.requests, 3, "a cut stream is retried");
    }
}

#[tokio::test]
async fn connection_refused_is_transient() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let error = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
}
