//! Where a store connects: one Redis server or a Redis Cluster (plain or TLS), the connection
//! its scripts run on, and the subscription to the breakers' channel.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::time::timeout;

/// How long connecting (TCP, handshake, subscription) may take before it counts as failed.
pub(super) const CONNECT: Duration = Duration::from_secs(1);

/// What a store connects to: one server, or a Redis Cluster.
pub(crate) struct Target {
    /// The server, or a client per cluster node given, to subscribe on one of them (a PUBLISH
    /// in a cluster reaches every node).
    pub(crate) nodes: Vec<redis::Client>,
    /// The cluster's client, for a cluster.
    pub(crate) cluster: Option<ClusterClient>,
}

/// The connection a store's scripts run on: multiplexed, cloned freely.
#[derive(Clone)]
pub(crate) enum Connection {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

impl Connection {
    /// Runs `command` on the cluster node at `node` (`host:port`); on one server, there.
    pub(crate) async fn on_node(&mut self, node: &str, command: Cmd) -> RedisResult<Value> {
        match self {
            Connection::Single(connection) => command.query_async(connection).await,
            Connection::Cluster(connection) => {
                let (host, port) = node
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| {
                        redis::RedisError::from(std::io::Error::other("not host:port"))
                    })?;
                let node = SingleNodeRoutingInfo::ByAddress { host, port };
                (connection.route_command(command, RoutingInfo::SingleNode(node))).await
            }
        }
    }
}

impl Target {
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// The connection scripts run on. A cluster's follows its slots' moves and reconnects to
    /// a node by itself; a failed node costs only the calls on its keys.
    pub(crate) async fn connect(&self) -> RedisResult<Connection> {
        if let Some(cluster) = &self.cluster {
            let connection = timeout(CONNECT * 2, cluster.get_async_connection())
                .await
                .map_err(|_| timed_out())??;
            return Ok(Connection::Cluster(connection));
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT))
            .set_response_timeout(Some(CONNECT));
        let client = self.nodes.first().ok_or_else(timed_out)?;
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Connection::Single(connection))
    }

    /// Subscribes to `channel`: on the server, or on the first cluster node, from the
    /// `from`th on, that answers. Returns the subscription and the node it is on.
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        from: usize,
    ) -> RedisResult<(PubSub, usize)> {
        let nodes = &self.nodes;
        let mut last = None;
        for at in (0..nodes.len()).map(|step| (from + step) % nodes.len()) {
            match subscribe_on(&nodes[at], channel).await {
                Ok(pubsub) => return Ok((pubsub, at)),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or_else(timed_out))
    }
}

async fn subscribe_on(client: &redis::Client, channel: &str) -> RedisResult<PubSub> {
    let mut pubsub = timeout(CONNECT, client.get_async_pubsub())
        .await
        .map_err(|_| timed_out())??;
    timeout(CONNECT, pubsub.subscribe(channel))
        .await
        .map_err(|_| timed_out())??;
    Ok(pubsub)
}

pub(super) fn timed_out() -> redis::RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}
