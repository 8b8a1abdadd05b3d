//! A hostile user and a bad day against the store's connection (issue 36, items 1 and 2):
//! passwords never shown, a server that stalls its handshake, TLS files that are not files,
//! a client key that is not the certificate's.

use std::time::Duration;

use super::*;

#[tokio::test]
async fn a_builders_debug_hides_the_password() {
    let single = format!("{:?}", Redis::builder("redis://:hunter2@127.0.0.1:1/"));
    assert!(!single.contains("hunter2"), "{single}");
    let cluster = format!(
        "{:?}",
        Redis::cluster(["redis://user:hunter2@127.0.0.1:1", "redis://127.0.0.1:2"])
    );
    assert!(!cluster.contains("hunter2"), "{cluster}");
    assert!(cluster.contains("127.0.0.1:2"), "{cluster}");
}

#[tokio::test]
async fn a_unix_socket_urls_password_is_shown_nowhere() {
    let url = "redis+unix:///nonexistent/resil.sock?db=1&pass=hunter2";
    let builder = format!("{:?}", Redis::builder(url));
    assert!(
        !builder.contains("hunter2") && builder.contains("db=1"),
        "{builder}"
    );
    // No socket there: the store starts, decides locally, and says so by its redacted name.
    let store = Redis::open(url).await.unwrap();
    let shown = format!("{store:?}");
    assert!(
        !shown.contains("hunter2") && shown.contains("pass=***"),
        "{shown}"
    );
    // A Unix URL naming a host has no path redis-rs can use: refused, the password hidden.
    let refused = Redis::open("redis+unix://host/x.sock?pass=hunter2").await;
    let error = refused.unwrap_err().to_string();
    assert!(
        !error.contains("hunter2") && error.contains("pass=***"),
        "{error}"
    );
}

/// A server that accepts TCP connections and never says a word (nor finishes a handshake).
fn mute_server() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_leaves_connect_and_calls_bounded() {
    let (listener, port) = mute_server();
    let mut urls = vec![format!("redis://127.0.0.1:{port}/")];
    if cfg!(feature = "redis-tls") {
        urls.push(format!("rediss://127.0.0.1:{port}/"));
    }
    for url in urls {
        let started = Instant::now();
        let store = tokio::time::timeout(Duration::from_secs(10), Redis::open(&url))
            .await
            .unwrap_or_else(|_| panic!("{url}: connect hung"))
            .expect("a valid URL");
        assert!(!store.is_available(), "{url}: a mute server is not a store");
        let answer = call_through("mute", &store).await;
        assert!(matches!(answer, Ok(Ok(()))), "{url}: {answer:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{url}");
    }
    drop(listener);
}

#[cfg(feature = "redis-tls")]
#[tokio::test]
async fn tls_files_that_are_not_files_are_refused_at_once() {
    use resil::shared::SharedError;
    let url = "rediss://127.0.0.1:1/";
    // A FIFO nobody writes to: opening it for reading would wait for a writer for ever.
    let fifo = std::env::temp_dir().join(format!("resil-ca-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|status| status.success()), "mkfifo failed");
    for path in [std::env::temp_dir(), "/dev/zero".into(), fifo.clone()] {
        let answer = std::thread::spawn({
            let path = path.clone();
            move || {
                let runtime = tokio::runtime::Runtime::new().unwrap();
                runtime.block_on(Redis::builder(url).ca_file(path).open())
            }
        });
        let started = Instant::now();
        while !answer.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "ca_file({path:?}) still reading after 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let answer = answer.join().unwrap();
        assert!(
            matches!(&answer, Err(SharedError::Tls { .. })),
            "{path:?}: {answer:?}"
        );
    }
    let _ = std::fs::remove_file(&fifo);
}

#[tokio::test]
async fn a_cluster_of_no_nodes_or_of_a_plain_server_is_refused_or_decides_locally() {
    let none = Redis::cluster(Vec::<String>::new()).open().await;
    assert!(
        matches!(&none, Err(resil::shared::SharedError::Url { .. })),
        "{none:?}"
    );
    let Some(server) = RedisServer::start() else {
        return;
    };
    let opened = tokio::time::timeout(
        Duration::from_secs(10),
        Redis::cluster([server.url()]).open(),
    )
    .await
    .expect("connecting to a plain server as a cluster hung");
    let Ok(store) = opened else {
        return;
    };
    let answer = call_through("not_a_cluster", &store).await;
    assert!(matches!(answer, Ok(Ok(()))), "{answer:?}");
    assert!(
        store.is_available() || store.last_error().is_some(),
        "a plain server given as a cluster: unavailable and silent about why"
    );
}

/// A call through a breaker named `breaker` and a gate, both shared through `store`, given
/// 5 s to answer.
async fn call_through(
    breaker: &str,
    store: &Redis,
) -> Result<Result<(), ApiError>, tokio::time::error::Elapsed> {
    let policy = Policy::builder()
        .breaker(Arc::new(Breaker::new(
            breaker,
            BreakerConfig::new(2, COOLDOWN).unwrap(),
        )))
        .rate(100, Duration::from_secs(1), 1)
        .shared_in(store)
        .build()
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        policy.run(|| async { Ok::<_, ApiError>(()) }),
    )
    .await
}
