//! The streaming client against the mock provider's streaming scenarios, over loopback and
//! real time (about 3 s): what the consumer saw and what the provider did, per scenario.
//!
//! Its one real-time margin: a healthy stream's gaps (40 ms, 20 ms in the cut scenarios)
//! against the 300 ms idle timeout. A gap of 260 ms more on loopback would be a machine that
//! cannot run a server at all; every stall and cut is the mock's own, so the counts are exact.

use std::time::Duration;

use resil::{Rejected, Transient};
use resil_lab::client::ClientError;
use resil_lab::streaming::run;

#[tokio::test]
async fn the_streaming_client_against_each_way_a_stream_fails() {
    let runs = run().await.unwrap();
    let run = |name: &str| runs.iter().find(|r| r.name.starts_with(name)).unwrap();

    let blocking = run("blocking");
    let streamed = run("streamed");
    assert!(blocking.complete && streamed.complete);
    assert_eq!(streamed.tokens, 20);
    assert_eq!(streamed.text, blocking.text, "the same answer either way");
    // The guide's (`resil::guide::streams`) "first token after ~40 ms instead of ~830 ms": one gap against twenty.
    assert!(
        streamed.first_token.unwrap() < blocking.first_token.unwrap() / 4,
        "{:?} streamed, {:?} blocking",
        streamed.first_token,
        blocking.first_token
    );
    assert_eq!(streamed.provider.requests, 1);

    let silent = run("stall before the first event");
    assert_eq!(silent.tokens, 0);
    assert!(matches!(
        silent.error,
        Some(ClientError::Rejected(Rejected::Timeout { after })) if after == Duration::from_millis(300)
    ));
    assert_eq!(silent.provider.requests, 3, "retried before the first item");

    let stalled = run("stall after 3 events");
    assert_eq!((stalled.tokens, stalled.complete), (3, false));
    assert!(matches!(
        stalled.error,
        Some(ClientError::Rejected(Rejected::Idle { after })) if after == Duration::from_millis(300)
    ));
    assert_eq!(
        stalled.provider.requests, 1,
        "never retried after the first item"
    );

    let closed = run("closed after 3 events");
    assert_eq!(closed.tokens, 3);
    assert!(matches!(
        closed.error,
        Some(ClientError::Rejected(Rejected::Incomplete))
    ));
    assert_eq!(closed.provider.requests, 1);

    let reset = run("reset after 3 events");
    assert_eq!(reset.tokens, 3);
    let error = reset.error.as_ref().unwrap();
    assert!(matches!(error, ClientError::Http(_)), "{error:?}");
    assert!(error.is_transient());
    assert_eq!(reset.provider.requests, 1);

    let limited = run("429 with Retry-After");
    assert!(limited.complete && limited.error.is_none());
    assert_eq!(
        (limited.provider.requests, limited.provider.rate_limited),
        (2, 1)
    );
    assert!(
        limited.first_token.unwrap() >= Duration::from_secs(1),
        "the retry waited out Retry-After"
    );

    let hostile = run("CRLF");
    assert!(hostile.complete && hostile.error.is_none());
    assert_eq!(hostile.text, "héllo0 🌍 héllo1 🌍 héllo2 🌍 ");
}
