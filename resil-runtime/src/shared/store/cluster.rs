//! What a Redis Cluster store does when a node fails, answers again, or is replaced by the
//! replica that took its slots: the node's keys decide locally meanwhile, and once they are
//! served again the outage is said over, the gates there take their slots from Redis again
//! and the breakers there re-sync.

use std::sync::Arc;

use redis::Value;
use tokio::time::timeout;

use super::super::breaker::open_key;
use super::nodes::slot;
use super::task::{self, sync};
use super::Store;
use crate::seams::BreakerNews;
use crate::sync::{lock_std, read_std};

impl Store {
    /// A cluster node failed a call: its keys decide locally a while (see [`Nodes`]); the
    /// first failure in a row is said, as an outage of `{store} node {host:port}`, and the
    /// map of slots is read again (the cluster may be failing over).
    ///
    /// [`Nodes`]: super::nodes::Nodes
    pub(super) fn node_failed(&self, node: &Arc<str>, reason: &str) {
        *lock_std(&self.last_error) = Some(Arc::from(format!("node {node}: {reason}")));
        if !self.nodes.failed(node) {
            return;
        }
        let reason = format!(
            "{reason}: the keys this Redis Cluster node holds decide locally until it answers or the cluster fails over; the other nodes' keys are still shared"
        );
        self.tell(Some(node), Some(&reason));
        if let (Ok(runtime), Some(store)) =
            (tokio::runtime::Handle::try_current(), self.me.upgrade())
        {
            runtime.spawn(async move { store.learn_slots().await });
        }
    }

    /// A cluster node answered: if it was out, its keys are back. The map of slots is read
    /// again: what answered may be the replica that took the node's place, reached through
    /// the cluster's redirection while the map still named the dead node.
    pub(super) fn node_answered(&self, node: &str) {
        if !self.nodes.answered(node) {
            return;
        }
        let breakers = self.keys_back(node, |key| *self.nodes.of(key) == *node);
        let connection = read_std(&self.connection).clone();
        if let (Ok(runtime), Some(store), Some(connection)) = (
            tokio::runtime::Handle::try_current(),
            self.me.upgrade(),
            connection,
        ) {
            let node = node.to_owned();
            runtime.spawn(async move {
                store.load_scripts(&node).await;
                let _ = sync(&store, &connection, &breakers).await;
                store.learn_slots().await;
            });
        }
    }

    /// The keys `held` picks, of the node that was out, are shared again: said, the gates
    /// there take their slots from Redis again, and the breakers there are returned to be
    /// re-synced.
    fn keys_back(&self, node: &str, held: impl Fn(&str) -> bool) -> Vec<BreakerNews> {
        if !self.nodes.any_out() {
            *lock_std(&self.last_error) = None;
        }
        self.tell(Some(node), None);
        for gate in self.gates.all() {
            if held(gate.name()) {
                gate.store_returned();
            }
        }
        (self.breakers.all().into_iter())
            .filter(|breaker| held(&open_key(breaker.name())))
            .collect()
    }

    /// Reads which cluster node serves which slots (`CLUSTER SLOTS`). A node that was out
    /// and serves none now was replaced (a replica took its slots): its keys are back, served
    /// by nodes that may lack the scripts.
    pub(super) async fn learn_slots(&self) {
        let Some(mut connection) = read_std(&self.connection).clone() else {
            return;
        };
        let asked = redis::cmd("CLUSTER").arg("SLOTS").clone();
        let answer = timeout(task::CHECK, asked.query_async::<Value>(&mut connection)).await;
        let Ok(Ok(answer)) = answer else {
            return;
        };
        let replaced = self.nodes.learn(&answer);
        if replaced.is_empty() {
            return;
        }
        let nodes = self.nodes.all();
        futures_util::future::join_all(nodes.iter().map(|node| self.load_scripts(node))).await;
        for (node, ranges) in replaced {
            let breakers = self.keys_back(&node, |key| {
                let slot = slot(key);
                (ranges.iter()).any(|(first, last)| (*first..=*last).contains(&slot))
            });
            let _ = sync(self, &connection, &breakers).await;
        }
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
