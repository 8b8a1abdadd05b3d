//! Feature `reqwest-middleware`, over loopback against the mock provider (real time, about
//! 3 s): Retry-After honoured, an exhausted quota and a streaming body not retried, the last
//! response handed back as the server sent it, one idempotency key per request, a 429's body
//! read only so far.
#![cfg(feature = "reqwest-middleware")]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use resil::middleware::PolicyMiddleware;
use resil::Policy;
use resil_lab::mock::MockProvider;

fn client(retry: u32) -> ClientWithMiddleware {
    let policy = Policy::builder()
        .timeout(Duration::from_secs(5))
        .retry(retry)
        .backoff(Duration::from_millis(1), Duration::from_millis(1))
        .build()
        .unwrap();
    ClientBuilder::new(reqwest::Client::new())
        .with(PolicyMiddleware::new(policy).idempotency_key("Idempotency-Key"))
        .build()
}

#[tokio::test]
async fn a_throttled_request_is_retried_after_its_wait() {
    let provider = MockProvider::start().await.unwrap();
    let started = Instant::now();
    let response = client(2)
        .post(provider.url("/v1/chat/completions?tokens=1&fail_first=2"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(provider.stats().requests, 3, "two 429s, then the answer");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "Retry-After: 1, twice"
    );
    provider.stop().await;
}

#[tokio::test]
async fn the_last_answer_comes_back_as_the_server_sent_it() {
    let provider = MockProvider::start().await.unwrap();
    let unavailable = client(1).get(provider.url("/503")).send().await.unwrap();
    assert_eq!(unavailable.status(), 503, "a response, not an error");
    assert_eq!(provider.stats().requests, 2);

    let quota = client(2).get(provider.url("/quota")).send().await.unwrap();
    assert_eq!(quota.status(), 429);
    assert!(quota.text().await.unwrap().contains("insufficient_quota"));
    assert_eq!(
        provider.stats().requests,
        3,
        "an exhausted quota is not retried"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_body_that_cannot_be_cloned_is_sent_once() {
    let provider = MockProvider::start().await.unwrap();
    let chunks = futures::stream::iter([Ok::<_, std::io::Error>("streamed")]);
    let response = client(2)
        .post(provider.url("/503"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(provider.stats().requests, 1);
    provider.stop().await;
}

/// Reads a request up to the end of its head; `None` if the client left first.
async fn request_head(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut buffer = [0; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => request.extend_from_slice(&buffer[..n]),
        }
    }
    Some(request)
}

/// A loopback server answering every request with a 429 whose chunked body is `body` followed,
/// if `endless`, by chunks sent until the client hangs up (a gigabyte at most), else by
/// silence with the connection held open. Returns its address.
async fn hostile_429(body: &'static [u8], endless: bool) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if request_head(&mut socket).await.is_none() {
                    return;
                }
                let mut buffer = [0; 1024];
                let head = "HTTP/1.1 429 Too Many Requests\r\nretry-after: 0\r\ntransfer-encoding: chunked\r\n\r\n";
                let first = format!("{:x}\r\n", body.len());
                let sent = async {
                    socket.write_all(head.as_bytes()).await?;
                    socket.write_all(first.as_bytes()).await?;
                    socket.write_all(body).await?;
                    socket.write_all(b"\r\n").await?;
                    let chunk = vec![b'x'; 1 << 16];
                    let mut total = 0usize;
                    while endless && total < 1 << 30 {
                        socket.write_all(b"10000\r\n").await?;
                        socket.write_all(&chunk).await?;
                        socket.write_all(b"\r\n").await?;
                        total += chunk.len();
                    }
                    std::io::Result::Ok(())
                };
                if sent.await.is_ok() && !endless {
                    // Holds the connection open, saying nothing more, until the client leaves.
                    let _ = socket.read(&mut buffer).await;
                }
            });
        }
    });
    address
}

/// A 429 with an endless body, or one that stalls, and a policy without a timeout: the
/// middleware reads at most the first 4 KiB, for at most a second, and hands back the answer.
#[tokio::test]
async fn a_429_body_is_read_only_up_to_its_limit() {
    let client = || {
        let policy = Policy::builder().build().unwrap();
        ClientBuilder::new(reqwest::Client::new())
            .with(PolicyMiddleware::new(policy))
            .build()
    };
    let endless = hostile_429(b"{\"error\": \"slow down\"}", true).await;
    let response = client()
        .get(format!("http://{endless}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let body = response.bytes().await.unwrap();
    assert_eq!(body.len(), resil::http::HttpError::BODY_LIMIT);
    assert!(body.starts_with(b"{\"error\": \"slow down\"}"));

    let stalled = hostile_429(b"{\"error\": \"insufficient_quota\"}", false).await;
    let response = client()
        .get(format!("http://{stalled}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(
        response.text().await.unwrap(),
        "{\"error\": \"insufficient_quota\"}",
        "what arrived within the wait is kept"
    );
}

/// A loopback server that answers 503 to the first `failures` requests of each key, then 200,
/// and records each request's `Idempotency-Key`.
async fn key_recorder(failures: usize) -> (std::net::SocketAddr, Arc<Mutex<Vec<String>>>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let keys = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&keys);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let Some(request) = request_head(&mut socket).await else {
                continue;
            };
            let head = String::from_utf8_lossy(&request).to_ascii_lowercase();
            let key = head
                .lines()
                .find_map(|line| line.strip_prefix("idempotency-key:"))
                .map(|key| key.trim().to_owned())
                .unwrap_or_default();
            let earlier = {
                let mut keys = seen.lock().unwrap();
                keys.push(key.clone());
                keys.iter().filter(|seen| **seen == key).count() - 1
            };
            let answer: &[u8] = if earlier < failures {
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
            };
            let _ = socket.write_all(answer).await;
        }
    });
    (address, keys)
}

/// Every attempt of one request carries the same key, and each request its own.
#[tokio::test]
async fn the_retries_of_a_request_carry_its_idempotency_key() {
    let (address, keys) = key_recorder(2).await;
    let client = client(2);
    for _ in 0..2 {
        let response = client
            .post(format!("http://{address}/v1/charges"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 6, "two 503s, then the answer, twice: {keys:?}");
    assert!(!keys[0].is_empty(), "the header is sent: {keys:?}");
    assert!(keys[..3].iter().all(|key| *key == keys[0]), "{keys:?}");
    assert!(keys[3..].iter().all(|key| *key == keys[3]), "{keys:?}");
    assert_ne!(keys[0], keys[3], "a new request, a new key");
}

/// A request's [`resil::Order`] in its extensions gives it its turn: on a `1/s` gate, a
/// critical request sent behind two batch requests goes second.
#[tokio::test]
async fn a_requests_order_in_its_extensions_gives_it_its_turn() {
    use resil::{Order, Priority};
    let (address, seen) = key_recorder(0).await;
    let policy = Policy::builder()
        .rate(1, Duration::from_secs(1), 1)
        .by_priority()
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(PolicyMiddleware::new(policy))
        .build();
    let send = |name: &'static str, class: Priority| {
        client
            .get(format!("http://{address}/v1/models"))
            .header("idempotency-key", name)
            .with_extension(Order::new(class).fair("tenant"))
            .send()
    };
    let batch = futures::future::join_all((0..2).map(|_| send("batch", Priority::Batch)));
    let critical = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        send("critical", Priority::Critical).await
    };
    let (batch, critical) = tokio::join!(batch, critical);
    assert!(batch.iter().all(Result::is_ok) && critical.is_ok());
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen, ["batch", "critical", "batch"]);
}
