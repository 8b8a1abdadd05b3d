//! What a Redis Cluster store does when a node fails, answers again, or is replaced by the
//! replica that took its slots: the node's keys decide locally meanwhile, and once they are
//! served again the outage is said over, the gates there take their slots from Redis again
//! and the breakers there re-sync.

use std::sync::Arc;

use redis::Value;
use tokio::time::timeout;

use super::super::breaker::open_key;
use super::nodes::{slot, Failure, Ranges};
use super::task::{self, sync};
use super::Store;
use crate::seams::BreakerNews;
use crate::sync::{lock_std, read_std};

impl Store {
    /// A cluster node failed a call: its keys decide locally a while (see [`Nodes`]); the
    /// first failure in a row is said, as an outage of `{store} node {host:port}`, and the
    /// map of slots is read again at each failure (the cluster may be failing over). A node
    /// the map no longer names failed a call routed by an older map: that says nothing.
    ///
    /// [`Nodes`]: super::nodes::Nodes
    pub(super) fn node_failed(&self, node: &Arc<str>, reason: &str) {
        let mut error = lock_std(&self.last_error);
        let failure = self.nodes.failed(node);
        if failure == Failure::Stale {
            return;
        }
        *error = Some(Arc::from(format!("node {node}: {reason}")));
        drop(error);
        if failure == Failure::First {
            let reason = format!(
                "{reason}: the keys this Redis Cluster node holds decide locally until it answers or the cluster fails over; the other nodes' keys are still shared"
            );
            self.tell(Some(node), Some(&reason));
        }
        if let (Ok(runtime), Some(store)) =
            (tokio::runtime::Handle::try_current(), self.me.upgrade())
        {
            runtime.spawn(async move { store.learn_slots().await });
        }
    }

    /// A cluster node answered: if it was out, its keys are back. The map of slots is read
    /// again first: what answered may be the replica that took the node's place, reached
    /// through the cluster's redirection while the map still named the dead node.
    pub(super) fn node_answered(&self, node: &str) {
        let Some(held) = self.nodes.answered(node) else {
            return;
        };
        let breakers = self.keys_back(node, &held);
        let connection = read_std(&self.connection).clone();
        if let (Ok(runtime), Some(store), Some(connection)) = (
            tokio::runtime::Handle::try_current(),
            self.me.upgrade(),
            connection,
        ) {
            let node = node.to_owned();
            runtime.spawn(async move {
                store.learn_slots().await;
                store.load_for(&node, &held).await;
                let _ = sync(&store, &connection, &breakers).await;
            });
        }
    }

    /// The keys in `held`, of the node that was out, are shared again: said, the gates there
    /// take their slots from Redis again, and the breakers there are returned to be re-synced.
    fn keys_back(&self, node: &str, held: &Ranges) -> Vec<BreakerNews> {
        self.error_over();
        self.tell(Some(node), None);
        let held = |key: &str| {
            let slot = slot(key);
            (held.iter()).any(|(first, last)| (*first..=*last).contains(&slot))
        };
        for gate in self.gates.all() {
            if held(gate.name()) {
                gate.store_returned();
            }
        }
        (self.breakers.all().into_iter())
            .filter(|breaker| held(&open_key(breaker.name())))
            .collect()
    }

    /// Reads which cluster node serves which slots (`CLUSTER SLOTS`), one read at a time. A
    /// node that was out and that others replaced (a replica took its slots) is back: its
    /// keys, served by nodes that may lack the scripts, are shared again.
    pub(super) async fn learn_slots(&self) {
        let Some(mut turn) = self.nodes.learning() else {
            return;
        };
        loop {
            self.learn_once().await;
            if !turn.again() {
                return;
            }
        }
    }

    async fn learn_once(&self) {
        let Some(mut connection) = read_std(&self.connection).clone() else {
            return;
        };
        let asked = redis::cmd("CLUSTER").arg("SLOTS").clone();
        let answer = timeout(task::CHECK, asked.query_async::<Value>(&mut connection)).await;
        let Ok(Ok(answer)) = answer else {
            return;
        };
        for (node, held) in self.nodes.learn(&answer) {
            let breakers = self.keys_back(&node, &held);
            self.load_for(&node, &held).await;
            let _ = sync(self, &connection, &breakers).await;
        }
    }

    /// Loads the scripts where `node`'s keys (the slots it `held`) are served now: on the
    /// node, or on the nodes that took its slots.
    async fn load_for(&self, node: &str, held: &Ranges) {
        let mut owners = self.nodes.owners(held);
        if owners.is_empty() {
            owners.push(Arc::from(node));
        }
        futures_util::future::join_all(owners.iter().map(|owner| self.load_scripts(owner))).await;
    }

    /// Loads every script on a cluster's `node`, so that running one does not depend on
    /// redis-rs's fallback for a missing script, which loads it on every node at once.
    pub(super) async fn load_scripts(&self, node: &str) {
        let Some(mut connection) = read_std(&self.connection).clone() else {
            return;
        };
        for source in super::super::scripts::SOURCES {
            let load = redis::cmd("SCRIPT").arg("LOAD").arg(source).clone();
            if !matches!(
                timeout(task::CHECK, connection.on_node(node, load)).await,
                Ok(Ok(_))
            ) {
                return;
            }
        }
    }
}
