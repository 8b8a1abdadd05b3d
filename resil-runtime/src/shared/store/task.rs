//! The store's task, which keeps the connection and the subscription up, and the re-sync of
//! the shared breakers it runs when Redis (or a cluster node) answers again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use rand::Rng;
use tokio::sync::{oneshot, Notify};
use tokio::time::{sleep, timeout};

use super::super::breaker::open_key;
use super::super::scripts::{CHANNEL, CLOSE, OPEN, OPEN_FOR};
use super::super::target::{timed_out, Connection, Target};
use super::Store;
use crate::seams::BreakerNews;

/// How long the task waits for a PING after an operation timed out (Redis may only be slow),
/// and for a re-sync.
pub(super) const CHECK: Duration = Duration::from_secs(1);
/// The reconnection backoff's first step and cap: a fleet's reconnections spread over a
/// second or two, and an instance is back at most 2 s after Redis is.
const RECONNECT_BASE: Duration = Duration::from_millis(100);
const RECONNECT_CAP: Duration = Duration::from_secs(2);

/// Brings shared breakers in line with Redis: a transition made here that Redis did not hear
/// of is published (it is the newest news); the others learn of the openings Redis holds. One
/// pipelined round trip however many breakers there are (and one more to load the scripts a
/// restarted Redis no longer has); on a cluster, one script per breaker, all at once, since
/// their keys are in different slots (a breaker on a node that does not answer is left to
/// its node's return).
pub(super) async fn sync(
    store: &Store,
    connection: &Connection,
    breakers: &[BreakerNews],
) -> redis::RedisResult<()> {
    if store.is_cluster() {
        let each = breakers.iter().map(|breaker| sync_one(store, breaker));
        futures_util::future::join_all(each).await;
        return Ok(());
    }
    let mut connection = connection.clone();
    let mut asked = Vec::new();
    let mut published = Vec::new();
    let mut pipe = redis::pipe();
    for breaker in breakers {
        match breaker.untold() {
            Some(announcement) => {
                pipe.invoke_script(&store.recording(&announcement)).ignore();
                published.push(announcement);
            }
            None => {
                pipe.cmd("PTTL").arg(open_key(breaker.name()));
                asked.push(breaker);
            }
        }
    }
    if asked.is_empty() && published.is_empty() {
        return Ok(());
    }
    // A pipeline sends EVALSHA without falling back to EVAL: the scripts must be there.
    if !published.is_empty() {
        for script in [&*OPEN, &*CLOSE] {
            timeout(CHECK, script.load_async(&mut connection))
                .await
                .map_err(|_| timed_out())??;
        }
    }
    let open_for: Vec<i64> = timeout(CHECK, pipe.query_async(&mut connection))
        .await
        .map_err(|_| timed_out())??;
    for announcement in published {
        announcement.published();
    }
    for (breaker, open_for) in asked.into_iter().zip(open_for) {
        opened_for(breaker, open_for);
    }
    Ok(())
}

/// One breaker's re-sync on a cluster, through its node.
async fn sync_one(store: &Store, breaker: &BreakerNews) {
    let key = open_key(breaker.name());
    match breaker.untold() {
        Some(announcement) => {
            let invocation = store.recording(&announcement);
            let ran: Option<redis::Value> = store.eval_on(CHECK, &key, &invocation).await;
            if ran.is_some() {
                announcement.published();
            }
        }
        None => {
            let mut invocation = OPEN_FOR.prepare_invoke();
            invocation.key(&key);
            if let Some(open_for) = store.eval_on::<i64>(CHECK, &key, &invocation).await {
                opened_for(breaker, open_for);
            }
        }
    }
}

/// Redis holds the breaker's opening for `open_for` ms more (none if not positive).
fn opened_for(breaker: &BreakerNews, open_for: i64) {
    if open_for > 0 {
        breaker.opened_elsewhere(Duration::from_millis(open_for.unsigned_abs()));
    }
}

/// The store's task: connect, subscribe, re-sync, listen; when Redis goes, reconnect with
/// jittered backoff so that a fleet of instances does not reconnect in lockstep. A cluster's
/// connection is kept once made (it follows the nodes by itself): when the subscription's
/// node goes, the task subscribes on the next node given, and the store stays available.
pub(super) async fn keep_up(
    store: Weak<Store>,
    check: Arc<Notify>,
    target: Target,
    contacted: oneshot::Sender<()>,
) {
    let mut contacted = Some(contacted);
    let mut failures = 0u32;
    let mut kept: Option<Connection> = None;
    let mut node = 0;
    loop {
        let connection = match kept.clone() {
            Some(connection) => Ok(connection),
            None => target.connect().await,
        };
        let subscribed = match connection {
            Ok(connection) => {
                (target.subscribe(CHANNEL, node).await).map(|(pubsub, at)| (connection, pubsub, at))
            }
            Err(error) => Err(error),
        };
        let reason = match subscribed {
            Ok((connection, pubsub, at)) => {
                node = at;
                let Some(strong) = store.upgrade() else {
                    return;
                };
                let synced = strong.up(connection.clone()).await;
                drop(strong);
                match synced {
                    Err(reason) => reason,
                    Ok(()) => {
                        if let Some(contacted) = contacted.take() {
                            let _ = contacted.send(());
                        }
                        failures = 0;
                        if target.is_cluster() {
                            kept = Some(connection.clone());
                        }
                        listen(&store, &check, connection, pubsub).await
                    }
                }
            }
            Err(error) => explained(&error),
        };
        let Some(strong) = store.upgrade() else {
            return;
        };
        if kept.is_some() {
            // A cluster's node went with the subscription: the next one takes it over.
            node += 1;
        } else {
            strong.lost(&reason);
        }
        drop(strong);
        if let Some(contacted) = contacted.take() {
            let _ = contacted.send(());
        }
        failures = failures.saturating_add(1);
        sleep(reconnect_wait(failures)).await;
    }
}

/// A connection failure, with the fix when it names a certificate.
fn explained(error: &redis::RedisError) -> String {
    let reason = error.to_string();
    #[cfg(feature = "redis-tls")]
    if let Some(advice) = super::super::tls::advice(&format!("{error:?}")) {
        return format!("{reason}: {advice}");
    }
    reason
}

/// Whether an error says Redis cannot be reached (rather than that it refused a command).
pub(super) fn unreachable(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
}

/// Hands what peers publish to the breakers until the subscription ends or Redis stops
/// answering; returns why.
async fn listen(
    store: &Weak<Store>,
    check: &Notify,
    connection: Connection,
    pubsub: redis::aio::PubSub,
) -> String {
    let mut messages = pubsub.into_on_message();
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else {
                    return "the subscription ended (connection lost)".to_owned();
                };
                let Some(store) = store.upgrade() else { return String::new() };
                store.receive(message.get_payload_bytes());
            }
            () = check.notified() => {
                let mut ping = connection.clone();
                let answer = timeout(CHECK, redis::cmd("PING").query_async::<String>(&mut ping)).await;
                if !matches!(answer, Ok(Ok(_))) {
                    return format!("no answer to PING within {CHECK:?}");
                }
                let Some(store) = store.upgrade() else { return String::new() };
                if let Err(reason) = store.up(connection.clone()).await {
                    return reason;
                }
            }
        }
    }
}

/// Equal jitter: half the exponential step for sure, half at random.
fn reconnect_wait(failures: u32) -> Duration {
    let step = RECONNECT_BASE
        .saturating_mul(1 << failures.min(10))
        .min(RECONNECT_CAP);
    step / 2 + rand::rng().random_range(Duration::ZERO..=step / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_spread_and_stay_bounded() {
        for failures in [1, 5, 40, u32::MAX] {
            let wait = reconnect_wait(failures);
            assert!(wait <= RECONNECT_CAP && wait >= RECONNECT_BASE, "{wait:?}");
        }
    }
}
