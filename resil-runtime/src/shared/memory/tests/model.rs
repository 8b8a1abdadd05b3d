//! The gate's model across two instances, exact on the paused clock: seeded random calls,
//! calls given up while they wait, and throttles, with the store killed midway. While it
//! answers, the two together never start more than `count + burst - 1` calls in any period
//! and nothing starts inside a hold; once it is gone, each keeps its own limit and its own
//! holds. (Its real-Redis twin, `tests/shared/gates.rs`, checks only what load cannot break.)

use super::*;

const COUNT: usize = 5;
const BURST: usize = 2;
const PERIOD: Duration = Duration::from_secs(1);
const KILLED_AT: Duration = Duration::from_millis(2_500);

#[derive(Debug, Clone, Copy)]
enum Op {
    Call,
    /// Waits at most this long for its slot, then gives up (its slot goes back).
    GiveUp(Duration),
    /// The provider answers 429, asking to wait this long.
    Throttle(Duration),
}

/// What happened, in the order it happened (several things happen at one instant).
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// A call started: by which instance, when (since the origin).
    Started(usize, Duration),
    /// A throttle's hold: by which instance, from when, until when.
    Held(usize, Duration, Duration),
}

async fn run_op(
    policy: &Policy,
    which: usize,
    origin: Instant,
    at: Duration,
    op: Op,
    log: &Mutex<Vec<Seen>>,
) {
    tokio::time::sleep_until(origin + at).await;
    let call = policy.run(|| async {
        let now = origin.elapsed();
        let mut log = log.lock().unwrap();
        log.push(Seen::Started(which, now));
        match op {
            Op::Throttle(wait) => {
                // The hold begins as the answer returns, in this same poll: nothing can start
                // between the two.
                log.push(Seen::Held(which, now, now + wait));
                Err(Error::Throttled(wait))
            }
            _ => Ok(()),
        }
    });
    match op {
        Op::GiveUp(patience) => {
            let _ = tokio::time::timeout(patience, call).await;
        }
        _ => {
            let _ = call.await;
        }
    }
}

/// The most calls that start in any window of one period, among `starts`.
fn most_in_a_period(starts: &[Duration]) -> usize {
    let mut starts = starts.to_vec();
    starts.sort();
    (0..starts.len())
        .map(|i| {
            starts[i..]
                .iter()
                .take_while(|at| **at - starts[i] < PERIOD)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// The seeded run: what was seen.
async fn seeded(seed: u64) -> Vec<Seen> {
    let hub = InMemory::new();
    let gated = || {
        let builder = Policy::builder()
            .name("memory::model")
            .rate(COUNT as u64, PERIOD, BURST as u64)
            .deadline(2 * PERIOD);
        instance(builder, hub.instance())
    };
    let instances = [gated(), gated()];
    let origin = Instant::now();
    let log = Mutex::new(Vec::new());
    let mut random = seed;
    let mut next = move |below: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % below
    };
    let mut operations = Vec::new();
    for (which, policy) in instances.iter().enumerate() {
        for _ in 0..40 {
            let at = Duration::from_millis(next(4_000));
            let op = match next(30) {
                0..=21 => Op::Call,
                22..=28 => Op::GiveUp(Duration::from_millis(next(800))),
                _ => Op::Throttle(Duration::from_millis(next(400))),
            };
            operations.push(run_op(policy, which, origin, at, op, &log));
        }
    }
    let killer = async {
        tokio::time::sleep_until(origin + KILLED_AT).await;
        hub.set_available(false);
    };
    tokio::join!(killer, futures::future::join_all(operations));
    log.into_inner().unwrap()
}

#[tokio::test(start_paused = true)]
async fn two_instances_keep_the_gate_model_with_the_store_and_without_it() {
    // Instant on the paused clock: many seeds, where the real-Redis twin affords two.
    let seeds = (1..=62_u64).map(|n| n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for seed in seeds.chain([0x2545_f491_4f6c_dd1d]) {
        let seen = seeded(seed).await;
        let starts = |keep: &dyn Fn(usize, Duration) -> bool| -> Vec<Duration> {
            seen.iter()
                .filter_map(|seen| match *seen {
                    Seen::Started(by, at) if keep(by, at) => Some(at),
                    _ => None,
                })
                .collect()
        };
        let while_up = starts(&|_, at| at < KILLED_AT);
        assert!(
            most_in_a_period(&while_up) < COUNT + BURST,
            "seed {seed:#x}: together over the limit while the store answers: {seen:?}"
        );
        assert!(
            while_up.len() >= COUNT,
            "seed {seed:#x}: the gate let calls through: {seen:?}"
        );
        for which in 0..2 {
            let alone = starts(&|by, at| by == which && at >= KILLED_AT);
            assert!(
                most_in_a_period(&alone) < COUNT + BURST,
                "seed {seed:#x}: instance {which} over its own limit without the store: {alone:?}"
            );
            assert!(
                !alone.is_empty(),
                "seed {seed:#x}: instance {which} went on"
            );
        }
        // A hold binds its own instance, and the other one while the store tells it.
        for (made, hold) in seen.iter().enumerate() {
            let Seen::Held(holder, from, until) = *hold else {
                continue;
            };
            let during = seen[made + 1..].iter().find(|seen| match **seen {
                Seen::Started(by, at) => {
                    at < until && (by == holder || (from < KILLED_AT && at < KILLED_AT))
                }
                Seen::Held(..) => false,
            });
            assert!(
                during.is_none(),
                "seed {seed:#x}: {during:?} started during instance {holder}'s hold from {from:?} to {until:?}"
            );
        }
    }
}
