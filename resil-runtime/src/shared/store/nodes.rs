//! [`Nodes`]: a Redis Cluster store's view of its nodes, so that a dead node costs only the
//! calls on its keys. Which node holds which hash slots (`CLUSTER SLOTS`, learnt when the
//! store connects, after a node's failures and after its return), and which nodes are skipped
//! until when: a call on a skipped node's key decides locally at once rather than waiting
//! `shared_timeout`, and one call tries the node again when its skip is over (1 s, doubling
//! to 8 s). A node out whose slots others serve now was replaced by a failover.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::{lock_std, read_std, write_std};

const SKIP_FIRST: Duration = Duration::from_secs(1);
const SKIP_MOST: Duration = Duration::from_secs(8);
const SLOTS: usize = 16384;
/// How a slot the map does not hold is named in place of its node: `slot N`.
const UNMAPPED: &str = "slot ";

#[derive(Default)]
pub(super) struct Nodes {
    /// Slot ranges (first, last) and the node (`host:port`) serving them.
    slots: RwLock<Vec<(u16, u16, Arc<str>)>>,
    /// The nodes skipped.
    out: Mutex<HashMap<Arc<str>, Out>>,
    learning: Mutex<Learning>,
}

/// Whether a read of the map runs, and whether another was asked for meanwhile.
#[derive(Default)]
struct Learning {
    running: bool,
    again: bool,
}

/// Slot ranges, each its first and last slot.
pub(super) type Ranges = Vec<(u16, u16)>;

/// A node out: skipped until when, after how many failures in a row, and the slot ranges it
/// held when it went out (whose new master, after a failover, stands in for it).
struct Out {
    until: Instant,
    failures: u32,
    held: Ranges,
}

/// What a failed call on a node means.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// The node is out from now: said.
    First,
    /// It was out already (tried again when its skip ended).
    Again,
    /// The map no longer names it (the call was routed by an older map): nothing.
    Stale,
}

impl Nodes {
    /// The node that holds `key`, as `host:port`, or `slot N` while the map does not say.
    pub(super) fn of(&self, key: &str) -> Arc<str> {
        let slot = slot(key);
        let slots = read_std(&self.slots);
        slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map_or_else(
                || Arc::from(format!("{UNMAPPED}{slot}")),
                |(.., node)| Arc::clone(node),
            )
    }

    /// Whether to decide `node`'s keys locally without asking it now.
    pub(super) fn skipped(&self, node: &str) -> bool {
        let out = lock_std(&self.out);
        out.get(node).is_some_and(|out| Instant::now() < out.until)
    }

    /// A call on `node` failed: skip it a while (longer at each failure in a row).
    pub(super) fn failed(&self, node: &Arc<str>) -> Failure {
        let held = {
            let map = read_std(&self.slots);
            let held = held(&map, node);
            match unmapped(node) {
                _ if !held.is_empty() => held,
                Some(slot) => vec![(slot, slot)],
                None if map.is_empty() => held,
                None => return Failure::Stale,
            }
        };
        let mut out = lock_std(&self.out);
        let out = out.entry(Arc::clone(node)).or_insert_with(|| Out {
            until: Instant::now(),
            failures: 0,
            held,
        });
        out.failures = out.failures.saturating_add(1);
        let skip = SKIP_FIRST
            .saturating_mul(1 << (out.failures - 1).min(3))
            .min(SKIP_MOST);
        out.until = Instant::now() + skip;
        if out.failures == 1 {
            Failure::First
        } else {
            Failure::Again
        }
    }

    /// A call on `node` was answered: if it was out (its return is said), the slot ranges it
    /// held.
    pub(super) fn answered(&self, node: &str) -> Option<Ranges> {
        lock_std(&self.out).remove(node).map(|out| out.held)
    }

    /// Every node the map names.
    pub(super) fn all(&self) -> Vec<Arc<str>> {
        self.serving(|_| true)
    }

    /// The nodes the map names as serving some of `ranges`.
    pub(super) fn owners(&self, ranges: &Ranges) -> Vec<Arc<str>> {
        self.serving(|(first, last)| {
            (ranges.iter()).any(|(from, to)| first <= *to && *from <= last)
        })
    }

    fn serving(&self, serves: impl Fn((u16, u16)) -> bool) -> Vec<Arc<str>> {
        let mut nodes: Vec<_> = (read_std(&self.slots).iter())
            .filter(|(first, last, _)| serves((*first, *last)))
            .map(|(.., node)| Arc::clone(node))
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// Whether any node is out now.
    pub(super) fn any_out(&self) -> bool {
        !lock_std(&self.out).is_empty()
    }

    /// What `CLUSTER SLOTS` answered: the map from then on (unchanged if it does not parse or
    /// names no slot). Returns the nodes that were out, that the map no longer names and whose
    /// slots others serve now (a replica took their place), with the slot ranges they held;
    /// they are out no more.
    pub(super) fn learn(&self, answer: &redis::Value) -> Vec<(Arc<str>, Ranges)> {
        let Some(slots) = parse(answer).filter(|slots| !slots.is_empty()) else {
            return Vec::new();
        };
        let mut served = vec![false; SLOTS];
        for (first, last, _) in &slots {
            served[usize::from(*first)..=usize::from(*last)].fill(true);
        }
        let named: HashSet<&str> = slots.iter().map(|(.., node)| &**node).collect();
        let mut out = lock_std(&self.out);
        let replaced: Vec<Arc<str>> = (out.iter())
            .filter(|(node, out)| {
                !named.contains(&***node)
                    && (out.held.iter()).all(|(first, last)| {
                        served[usize::from(*first)..=usize::from(*last)]
                            .iter()
                            .all(|served| *served)
                    })
            })
            .map(|(node, _)| Arc::clone(node))
            .collect();
        drop(named);
        *write_std(&self.slots) = slots;
        (replaced.into_iter())
            .filter_map(|node| Some((Arc::clone(&node), out.remove(&node)?.held)))
            .collect()
    }

    /// A turn to read the map: `None` while another read runs, which then runs once more
    /// (reads one at a time, so that an older answer never lands after a newer one).
    pub(super) fn learning(&self) -> Option<Turn<'_>> {
        let mut learning = lock_std(&self.learning);
        if learning.running {
            learning.again = true;
            return None;
        }
        learning.running = true;
        Some(Turn {
            nodes: self,
            over: false,
        })
    }
}

/// The one read of the map that runs ([`Nodes::learning`]); dropped unfinished, it lets the
/// next one run.
pub(super) struct Turn<'a> {
    nodes: &'a Nodes,
    over: bool,
}

impl Turn<'_> {
    /// Whether to read the map once more: another read was asked for meanwhile. If not, the
    /// turn is over.
    pub(super) fn again(&mut self) -> bool {
        let mut learning = lock_std(&self.nodes.learning);
        if std::mem::take(&mut learning.again) {
            return true;
        }
        learning.running = false;
        self.over = true;
        false
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.over {
            *lock_std(&self.nodes.learning) = Learning::default();
        }
    }
}

/// The slot of a node named for a slot the map did not hold (`slot N`, see [`Nodes::of`]).
fn unmapped(node: &str) -> Option<u16> {
    node.strip_prefix(UNMAPPED)?.parse().ok()
}

/// The slot ranges `node` serves in `map`.
fn held(map: &[(u16, u16, Arc<str>)], node: &str) -> Ranges {
    (map.iter())
        .filter(|(.., owner)| **owner == *node)
        .map(|(first, last, _)| (*first, *last))
        .collect()
}

/// The slot ranges and their masters in a `CLUSTER SLOTS` answer, or `None` if it does not
/// parse.
fn parse(answer: &redis::Value) -> Option<Vec<(u16, u16, Arc<str>)>> {
    let redis::Value::Array(ranges) = answer else {
        return None;
    };
    let mut slots = Vec::with_capacity(ranges.len());
    for range in ranges {
        let redis::Value::Array(range) = range else {
            return None;
        };
        let (Some(first), Some(last), Some(redis::Value::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            return None;
        };
        let (Ok(first), Ok(last)) = (
            redis::from_redis_value_ref::<u16>(first),
            redis::from_redis_value_ref::<u16>(last),
        ) else {
            return None;
        };
        if first > last || usize::from(last) >= SLOTS {
            return None;
        }
        let (Some(host), Some(port)) = (master.first(), master.get(1)) else {
            return None;
        };
        let (Ok(host), Ok(port)) = (
            redis::from_redis_value_ref::<String>(host),
            redis::from_redis_value_ref::<u16>(port),
        ) else {
            return None;
        };
        slots.push((first, last, Arc::from(format!("{host}:{port}"))));
    }
    Some(slots)
}

/// A key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash tag (the text between its
/// first `{` and the next `}`, if not empty), else of the whole key, modulo 16384.
pub(super) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let tag = &bytes[open + 1..];
        let close = tag.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &tag[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_eq!(
            slot("resil:{breaker:a}:open"),
            slot("resil:{breaker:a}:probe")
        );
    }

    /// A `CLUSTER SLOTS` answer: each range's first and last slot and its master's port.
    fn answer(ranges: &[(i64, i64, i64)]) -> redis::Value {
        use redis::Value::{Array, BulkString, Int};
        let range = |(first, last, port): &(i64, i64, i64)| {
            let master = vec![BulkString(b"127.0.0.1".to_vec()), Int(*port)];
            Array(vec![Int(*first), Int(*last), Array(master)])
        };
        Array(ranges.iter().map(range).collect())
    }

    /// Nodes whose map has 7001 serving 0–8191 and 7002 the rest, and 7001 out.
    fn with_7001_out() -> (Nodes, Arc<str>) {
        let nodes = Nodes::default();
        assert!((nodes.learn(&answer(&[(0, 8191, 7001), (8192, 16383, 7002)]))).is_empty());
        let dead: Arc<str> = Arc::from("127.0.0.1:7001");
        assert_eq!(nodes.failed(&dead), Failure::First);
        (nodes, dead)
    }

    #[test]
    fn a_node_out_whose_slots_another_serves_was_replaced() {
        let (nodes, dead) = with_7001_out();
        assert_eq!(&*nodes.of("foo"), "127.0.0.1:7002", "slot 12182");
        assert!(
            (nodes.learn(&answer(&[(0, 8191, 7001), (8192, 16383, 7002)]))).is_empty(),
            "still its master's: not failed over yet"
        );
        assert!(nodes.skipped(&dead));
        assert_eq!(
            nodes.learn(&answer(&[(8192, 16383, 7002)])),
            Vec::new(),
            "its slots unserved: nobody took its place"
        );
        assert_eq!(
            nodes.learn(&answer(&[
                (0, 0, 7004),
                (8191, 8191, 7004),
                (8192, 16383, 7002)
            ])),
            Vec::new(),
            "served at its ends only: slots 1-8190 have nobody"
        );
        assert!(nodes.skipped(&dead));
        let replaced = nodes.learn(&answer(&[(0, 8191, 7004), (8192, 16383, 7002)]));
        assert_eq!(replaced, vec![(dead.clone(), vec![(0, 8191)])]);
        assert!(!nodes.skipped(&dead) && !nodes.any_out());
        assert_eq!(nodes.all().len(), 2);
        assert_eq!(
            nodes.owners(&vec![(100, 200)]),
            vec![Arc::from("127.0.0.1:7004")]
        );
        assert_eq!(
            nodes.failed(&dead),
            Failure::Stale,
            "a call routed by the older map failed: it does not take the node out again"
        );
        assert!(!nodes.any_out());
    }

    #[test]
    fn answers_that_say_nothing_keep_the_map() {
        let (nodes, dead) = with_7001_out();
        for nothing in [
            redis::Value::Nil,
            answer(&[]),
            answer(&[(0, 16384, 7004)]),
            answer(&[(9, 8, 7004)]),
        ] {
            assert!(nodes.learn(&nothing).is_empty());
            assert_eq!(nodes.all().len(), 2, "{nothing:?}");
            assert!(nodes.skipped(&dead));
        }
    }

    #[test]
    fn a_slot_the_map_did_not_hold_is_back_once_served() {
        let nodes = Nodes::default();
        let unmapped = nodes.of("foo");
        assert_eq!(&*unmapped, "slot 12182");
        assert_eq!(nodes.failed(&unmapped), Failure::First);
        assert!(
            (nodes.learn(&answer(&[(0, 8191, 7001)]))).is_empty(),
            "still unserved"
        );
        assert_eq!(nodes.failed(&unmapped), Failure::Again);
        let back = nodes.learn(&answer(&[(0, 8191, 7001), (8192, 16383, 7002)]));
        assert_eq!(back, vec![(unmapped, vec![(12182, 12182)])]);
        assert!(!nodes.any_out());
    }

    #[test]
    fn the_map_is_read_once_at_a_time_and_once_more_if_asked_meanwhile() {
        let nodes = Nodes::default();
        let mut turn = nodes.learning().unwrap();
        assert!(nodes.learning().is_none() && nodes.learning().is_none());
        assert!(turn.again(), "asked meanwhile: once more");
        assert!(!turn.again(), "then over");
        drop(turn);
        let turn = nodes.learning().expect("the next read runs");
        drop(turn);
        assert!(
            nodes.learning().is_some(),
            "a turn dropped unfinished lets the next run"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_node_is_skipped_longer_at_each_failure_and_said_once() {
        let nodes = Nodes::default();
        let node: Arc<str> = Arc::from("127.0.0.1:7001");
        assert_eq!(
            nodes.failed(&node),
            Failure::First,
            "the first failure is said"
        );
        assert!(nodes.skipped(&node));
        tokio::time::advance(SKIP_FIRST).await;
        assert!(!nodes.skipped(&node), "one call tries again");
        assert_eq!(nodes.failed(&node), Failure::Again, "said once");
        tokio::time::advance(SKIP_FIRST).await;
        assert!(nodes.skipped(&node), "twice as long");
        assert_eq!(nodes.answered(&node), Some(Vec::new()));
        assert!(!nodes.skipped(&node) && !nodes.any_out());
    }
}
