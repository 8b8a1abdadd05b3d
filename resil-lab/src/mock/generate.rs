//! How an answer is generated: its tokens, one after another, as Server-Sent Events (plain or
//! in the hostile style), and what a request asked to go wrong on the way. Apart from the
//! server itself, which is long enough already.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::{mpsc, watch};

use super::{Answer, State};

/// One token as a plain Server-Sent Event.
pub(super) fn sse(token: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{token}\"}}}}]}}\n\n"
    ))
}

/// The `n`-th token: plain, or with multibyte characters for the hostile style.
fn token(n: usize, hostile: bool) -> String {
    if hostile {
        format!("héllo{n} 🌍 ")
    } else {
        format!("token{n} ")
    }
}

/// One event as the hostile style sends it: `\r\n` line ends, `event:` and `id:` lines, in
/// two frames split inside the first four-byte character.
fn hostile_frames(n: usize, data: &str) -> [Bytes; 2] {
    let event = format!("event: message\r\nid: {n}\r\ndata: {data}\r\n\r\n");
    let split = event.find('🌍').map_or(event.len() / 2, |at| at + 2);
    let bytes = Bytes::from(event);
    [bytes.slice(..split), bytes.slice(split..)]
}

/// What one request asked to be generated.
pub(super) struct Generation {
    pub(super) tokens: usize,
    pub(super) delay: Duration,
    pub(super) cut: Option<usize>,
    pub(super) stall: Option<usize>,
    pub(super) hold: Option<usize>,
    pub(super) orderly: bool,
    pub(super) hostile: bool,
    pub(super) key: Option<String>,
}

/// Generates the whole answer, streaming it while the client listens; billing does not stop
/// when the client hangs up.
pub(super) async fn generate(
    state: Arc<State>,
    generation: Generation,
    tx: mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>,
    finished: watch::Sender<Answer>,
) {
    let mut chunks = Vec::with_capacity(generation.tokens);
    tokio::time::sleep(state.quirks.first_token_wait(generation.key.as_deref())).await;
    for n in 0..generation.tokens {
        tokio::time::sleep(generation.delay).await;
        if generation.hold == Some(n) {
            // Until the client gives up: the rest is generated for nobody but a replay.
            tx.closed().await;
        }
        let token = token(n, generation.hostile);
        if generation.cut == Some(n) || generation.stall == Some(n) {
            if generation.stall == Some(n) {
                // Silent, with the connection open, until the client gives up.
                tx.closed().await;
            } else if !generation.orderly {
                let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut");
                let _ = tx.send(Err(reset)).await;
            }
            // An abandoned answer is not replayed: a retry with the same key generates anew.
            if let Some(key) = &generation.key {
                state.answers.lock().unwrap().remove(key);
            }
            state.generating.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        if generation.hostile {
            let data = format!(r#"{{"choices":[{{"delta":{{"content":"{token}"}}}}]}}"#);
            for frame in hostile_frames(n, &data) {
                let _ = tx.send(Ok(Frame::data(frame))).await;
            }
        } else {
            let _ = tx.send(Ok(Frame::data(sse(&token)))).await;
        }
        chunks.push(token);
    }
    let done = if generation.hostile {
        "event: message\r\ndata: [DONE]\r\n\r\n"
    } else {
        "data: [DONE]\n\n"
    };
    let _ = tx
        .send(Ok(Frame::data(Bytes::from_static(done.as_bytes()))))
        .await;
    state.generating.fetch_sub(1, Ordering::SeqCst);
    let _ = finished.send(Some(Arc::new(chunks)));
}
