//! Fail-open at each instance's share, on the paused clock: instances tell the store they use
//! a gate; while it is down, each runs its local gate at the rate divided by the instances it
//! last saw, so that together they keep about the declared rate, and says so once.

use std::sync::Mutex;

use crate::events::{self, Event, Listener};

use super::*;

const INSTANCES: usize = 4;
const SECOND: Duration = Duration::from_secs(1);

/// The instances' events about the gate named `gate`.
#[derive(Debug, Default)]
struct Shares {
    gate: String,
    heard: Mutex<Vec<u64>>,
}

impl Listener for Shares {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::GateShare { gate, instances } = event {
            if *gate == self.gate {
                self.heard.lock().unwrap().push(*instances);
            }
        }
    }
}

fn gated(hub: &InMemory, name: &str) -> Policy {
    let builder = Policy::builder().name(name).rate(8, SECOND, 2);
    instance(builder, hub.instance())
}

/// Every instance calls as fast as its gate lets it, for `how_long`: the calls each made
/// (each instance's last call may have reserved its slot before the end and made it after).
async fn flood(policies: &[Arc<Policy>], how_long: Duration) -> Vec<u32> {
    let until = Instant::now() + how_long;
    let tasks: Vec<_> = policies
        .iter()
        .map(|policy| {
            let policy = Arc::clone(policy);
            tokio::spawn(async move {
                let calls = AtomicU32::new(0);
                while Instant::now() < until {
                    let _ = call(&policy, &calls, Ok(())).await;
                }
                calls.load(Ordering::Relaxed)
            })
        })
        .collect();
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    counts
}

#[tokio::test(start_paused = true)]
async fn while_the_store_is_down_each_instance_takes_its_share_of_the_rate() {
    let hub = InMemory::new();
    let name = "memory::share";
    let listener = Arc::new(Shares {
        gate: crate::seams::gate_key("rate", name),
        heard: Mutex::default(),
    });
    events::add_global_listener(Arc::clone(&listener) as Arc<dyn Listener>);
    let policies: Vec<_> = (0..INSTANCES)
        .map(|_| Arc::new(gated(&hub, name)))
        .collect();
    let together = flood(&policies, 3 * SECOND).await;
    let sent: u32 = together.iter().sum();
    let most = 3 * 8 + 2 + INSTANCES as u32;
    assert!(
        sent <= most,
        "8/s across all while the store answers: {sent}"
    );

    hub.set_available(false);
    let alone = flood(&policies, 10 * SECOND).await;
    let sent: u32 = alone.iter().sum();
    // 8/s for the service, each instance at 2/s with a burst of 1: about 80 in 10 s, where
    // each at the whole rate would send 320.
    assert!(
        (70..=80 + INSTANCES as u32 * 2).contains(&sent),
        "{alone:?}: {sent} in 10 s while the store is down"
    );
    assert_eq!(
        *listener.heard.lock().unwrap(),
        vec![INSTANCES as u64; INSTANCES],
        "each instance said its share once"
    );

    hub.set_available(true);
    let back = flood(&policies, 3 * SECOND).await;
    let sent: u32 = back.iter().sum();
    assert!(sent <= most, "8/s across all once it is back: {sent}");
}

#[tokio::test(start_paused = true)]
async fn an_instance_that_saw_no_other_keeps_the_whole_rate() {
    let hub = InMemory::new();
    let policy = Arc::new(gated(&hub, "memory::alone"));
    flood(std::slice::from_ref(&policy), SECOND).await;
    hub.set_available(false);
    let sent = flood(std::slice::from_ref(&policy), 10 * SECOND).await[0];
    assert!((78..=82).contains(&sent), "{sent} in 10 s at 8/s");
}
