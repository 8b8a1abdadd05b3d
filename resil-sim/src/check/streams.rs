//! What a streaming call's consumer saw: one attempt's items, in order, none after the final
//! item or an error, no gap past the idle timeout, and an end the stream module promises.

use std::time::Duration;

use tokio::time::Instant;

use super::{Checker, Inv};
use crate::provider::SimError;
use crate::streams::Chunk;

/// What a consumer saw of its stream so far.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// The attempt whose items it reads, and the place of the next.
    tag: Option<u64>,
    next: u32,
    /// When it saw the last item.
    last_at: Option<Instant>,
    /// It saw the final item, or an error.
    finished: bool,
    errored: bool,
    /// The breaker each attempt's stream goes through, by tag: a failure after the commit
    /// counts there.
    breakers: Vec<(u64, (usize, u8, String))>,
}

/// How late an idle timeout's end may come: tokio's timers fire on the millisecond.
const TIMER: Duration = Duration::from_millis(1);

impl Checker {
    /// Call `index` connected the stream `tag` through `breaker` (on its instance and policy).
    pub(crate) fn connected(&mut self, index: usize, tag: u64, breaker: Option<String>) {
        let call = &self.calls[index].0;
        let key = (call.instance, call.policy);
        if let Some(name) = breaker {
            let seen = &mut self.calls[index].1.seen;
            seen.breakers.push((tag, (key.0, key.1, name)));
        }
    }

    /// The consumer of call `index` read `item`.
    pub(crate) fn item(&mut self, index: usize, item: &Result<Chunk, SimError>) {
        let now = Instant::now();
        let line = format!("c{} reads {item:?}", self.calls[index].0.logical.0);
        self.log(line);
        let (call, state) = &mut self.calls[index];
        let (caller, idle) = (Some(call.logical.0), call.idle);
        let seen = &mut state.seen;
        let after_end = seen.finished || seen.errored;
        let gap = seen.last_at.map(|at| now - at);
        seen.last_at = Some(now);
        let (tag, expected) = (seen.tag, seen.next);
        match item {
            Ok(chunk) => {
                seen.tag.get_or_insert(chunk.tag);
                seen.next = chunk.seq + 1;
                seen.finished |= chunk.last;
                self.check(
                    Inv::StreamOneAttempt,
                    tag.is_none_or(|tag| tag == chunk.tag),
                    caller,
                    || {
                        format!(
                            "the consumer read item {} of stream {} after items of stream {tag:?}",
                            chunk.seq, chunk.tag
                        )
                    },
                );
                self.check(Inv::StreamOneAttempt, chunk.seq == expected, caller, || {
                    format!(
                        "the consumer read item {} of stream {} where item {expected} was next",
                        chunk.seq, chunk.tag
                    )
                });
            }
            Err(error) => {
                seen.errored = true;
                // Counted for the breaker of the stream read: it may open on it.
                let breaker = (seen.breakers.iter())
                    .find(|(stream, _)| Some(*stream) == tag)
                    .map(|(_, breaker)| breaker.clone());
                if let Some(breaker) = breaker {
                    self.ledger.failing(breaker);
                }
                let idled = matches!(
                    error,
                    SimError::Rejected(resil_runtime::Rejected::Idle { .. })
                );
                if let (Some(idle), Some(gap), true) = (idle, gap, idled) {
                    self.check(Inv::StreamEnds, gap + TIMER >= idle, caller, || {
                        format!("the stream ended idle {gap:?} after its last item, its idle timeout {idle:?}")
                    });
                }
            }
        }
        self.check(Inv::StreamEnds, !after_end, caller, || {
            format!("the consumer read {item:?} after the stream's final item or error")
        });
        if let (Some(idle), Some(gap)) = (idle, gap) {
            self.check(Inv::StreamEnds, gap <= idle + TIMER, caller, || {
                format!("{gap:?} between two items, the idle timeout {idle:?}")
            });
        }
    }

    /// The consumer of call `index` read its stream's end: the final item or an error came.
    pub(crate) fn stream_ended(&mut self, index: usize) {
        let (call, state) = &self.calls[index];
        let caller = Some(call.logical.0);
        let ended = state.seen.finished || state.seen.errored;
        self.log(format!("c{} read its stream to the end", call.logical.0));
        self.check(Inv::StreamEnds, ended, caller, || {
            "the stream ended with neither its final item nor an error (Rejected::Incomplete)"
                .to_owned()
        });
    }
}
