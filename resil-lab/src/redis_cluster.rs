//! A real Redis Cluster of three masters on 127.0.0.1, for the tests: each node a
//! `redis-server --cluster-enabled yes` on a free port, joined by `redis-cli --cluster
//! create`; a node can be killed; every node is stopped when dropped. With TLS, each node
//! also listens on a TLS port and the nodes talk TLS among themselves (`--tls-cluster yes`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, ServerTls};

/// Three masters (nodes 0, 1 and 2), replicated or not, `cluster-require-full-coverage no`: a
/// dead master's slots fail (until its replica takes over), the others' keep working.
#[derive(Debug)]
pub struct RedisCluster {
    ports: Vec<u16>,
    /// Each node's TLS port, when started by [`RedisCluster::start_tls`].
    tls_ports: Vec<u16>,
    children: Vec<Option<Child>>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the three nodes, joins them, and waits until the cluster says `ok`.
    ///
    /// Without `redis-server` and `redis-cli` this panics with how to install them (or, with
    /// `RESIL_SKIP_REDIS=1`, returns `None` for the caller to skip), as
    /// [`RedisServer::start`] does.
    pub fn start() -> Option<RedisCluster> {
        Self::start_with(None, false)
    }

    /// [`RedisCluster::start`] with a replica for each master (nodes 3, 4 and 5, as redis-cli
    /// pairs them), which takes its master's place when the master has not answered its peers
    /// for two seconds (`cluster-node-timeout 2000`: a loaded machine's stall of a second
    /// fails nothing over). Waits until every replica has synced.
    pub fn start_replicated() -> Option<RedisCluster> {
        Self::start_with(None, true)
    }

    /// [`RedisCluster::start`], each node also listening for TLS on a second port
    /// ([`RedisCluster::tls_urls`]) with `tls`'s files, and the cluster bus in TLS; the plain
    /// ports stay for the test's own looks ([`RedisCluster::query`]), and a plain client is
    /// told of the plain ports, a TLS client of the TLS ones.
    pub fn start_tls(tls: ServerTls) -> Option<RedisCluster> {
        Self::start_with(Some(tls), false)
    }

    fn start_with(tls: Option<ServerTls>, replicated: bool) -> Option<RedisCluster> {
        let cli = Command::new("redis-cli")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok();
        if !RedisServer::installed() || !cli {
            let advice = "redis-server and redis-cli are not installed: `apt-get install -y redis-server redis-tools` runs the Redis Cluster tests";
            let skip = std::env::var_os("RESIL_SKIP_REDIS");
            if !skip.is_some_and(|value| !value.is_empty() && value != "0") {
                panic!("{advice}, or set RESIL_SKIP_REDIS=1 to skip them");
            }
            eprintln!("\n*** SKIPPED (RESIL_SKIP_REDIS): {advice} ***\n");
            return None;
        }
        let count = if replicated { 6 } else { 3 };
        let mut tries = 0;
        let cluster = loop {
            tries += 1;
            let mut cluster = Self::spawn_nodes(count, tls.as_ref(), replicated);
            // A node whose port or bus port another process took between the pick and its
            // start exits at once: start again elsewhere rather than fail the test.
            match (0..count).find(|node| !cluster.answers(*node)) {
                None => break cluster,
                Some(node) => assert!(
                    tries < 3,
                    "the cluster's node on port {} never answered, three starts in a row",
                    cluster.ports[node]
                ),
            }
        };
        // The nodes meet on their cluster bus, whose port follows the TLS port when the bus
        // talks TLS: redis-cli must name the nodes by that port, and speak TLS to them.
        let mut create = Command::new("redis-cli");
        let joined = match &tls {
            Some(tls) => {
                create.arg("--tls").arg("--cacert").arg(&tls.ca);
                &cluster.tls_ports
            }
            None => &cluster.ports,
        };
        let created = create
            .arg("--cluster")
            .arg("create")
            .args(joined.iter().map(|port| format!("127.0.0.1:{port}")))
            .args(["--cluster-replicas", if replicated { "1" } else { "0" }])
            .arg("--cluster-yes")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs");
        assert!(created.success(), "redis-cli --cluster create failed");
        for node in 0..count {
            cluster.wait(node, "says cluster_state:ok", |cluster| {
                let info = cluster.query::<String>(node, redis::cmd("CLUSTER").arg("INFO"));
                info.is_some_and(|info| info.contains("cluster_state:ok"))
            });
        }
        for node in 3..count {
            cluster.wait(node, "synced with its master", |cluster| {
                let info = cluster.query::<String>(node, redis::cmd("INFO").arg("replication"));
                info.is_some_and(|info| info.contains("master_link_status:up"))
            });
        }
        Some(cluster)
    }

    fn spawn_nodes(count: usize, tls: Option<&ServerTls>, replicated: bool) -> RedisCluster {
        let ports = node_ports(count);
        let dir = std::env::temp_dir().join(format!(
            "resil-redis-cluster-{}-{}",
            ports[0],
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the cluster");
        let tls_ports = match tls {
            Some(_) => node_ports(count),
            None => Vec::new(),
        };
        let children = (0..count)
            .map(|node| {
                let tls = tls.map(|tls| (tls_ports[node], tls));
                Some(spawn(ports[node], tls, replicated, &dir))
            })
            .collect();
        RedisCluster {
            ports,
            tls_ports,
            children,
            dir,
        }
    }

    /// Whether the node answers a PING within 20 s; `false` at once if its process has exited.
    fn answers(&mut self, node: usize) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if self.query::<String>(node, &redis::cmd("PING")).is_some() {
                return true;
            }
            let exited = (self.children[node].as_mut())
                .is_none_or(|child| child.try_wait().is_ok_and(|status| status.is_some()));
            if exited {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// The nodes' URLs, `redis://127.0.0.1:{port}/`.
    pub fn urls(&self) -> Vec<String> {
        (self.ports.iter())
            .map(|port| format!("redis://127.0.0.1:{port}/"))
            .collect()
    }

    /// The nodes' TLS URLs, `rediss://127.0.0.1:{tls port}/`, for a cluster started by
    /// [`RedisCluster::start_tls`].
    pub fn tls_urls(&self) -> Vec<String> {
        assert!(
            !self.tls_ports.is_empty(),
            "a cluster started with start_tls"
        );
        (self.tls_ports.iter())
            .map(|port| format!("rediss://127.0.0.1:{port}/"))
            .collect()
    }

    /// The node's port.
    pub fn port(&self, node: usize) -> u16 {
        self.ports[node]
    }

    /// Kills a node at once (SIGKILL) and waits for it to go.
    pub fn kill(&mut self, node: usize) {
        if let Some(mut child) = self.children[node].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes a node (SIGSTOP): it keeps its connections but answers nothing until
    /// [`resume`](Self::resume)d, as a node stalled by a long command or a swapping host.
    pub fn pause(&self, node: usize) {
        self.signal(node, "-STOP");
    }

    /// Lets a [`pause`](Self::pause)d node answer again (SIGCONT).
    pub fn resume(&self, node: usize) {
        self.signal(node, "-CONT");
    }

    fn signal(&self, node: usize, signal: &str) {
        if let Some(child) = &self.children[node] {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
        }
    }

    /// The node (0, 1 or 2, or a replica that took its master's place) that holds `key`'s hash
    /// slot, as a live node's `CLUSTER SLOTS` says.
    pub fn node_of(&self, key: &str) -> usize {
        let live = (0..self.ports.len())
            .find(|node| self.children[*node].is_some())
            .expect("a live node");
        let slot: u16 = self
            .query(live, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
            .expect("CLUSTER KEYSLOT");
        // Each range: its first and last slot, then its master `[host, port, id, …]`.
        let ranges: Vec<Vec<redis::Value>> = self
            .query(live, redis::cmd("CLUSTER").arg("SLOTS"))
            .expect("CLUSTER SLOTS");
        let number = |value: &redis::Value| redis::from_redis_value_ref::<u16>(value).ok();
        let port = ranges
            .iter()
            .find(|range| {
                matches!((number(&range[0]), number(&range[1])),
                    (Some(first), Some(last)) if (first..=last).contains(&slot))
            })
            .and_then(|range| redis::from_redis_value_ref::<Vec<redis::Value>>(&range[2]).ok())
            .and_then(|master| number(&master[1]))
            .expect("every slot is served");
        self.ports
            .iter()
            .position(|node| *node == port)
            .expect("one of the nodes")
    }

    /// Runs one command on a node (redis-rs, blocking); `None` if it does not answer.
    pub fn query<T: redis::FromRedisValue>(&self, node: usize, command: &redis::Cmd) -> Option<T> {
        let url = format!("redis://127.0.0.1:{}/", self.ports[node]);
        let client = redis::Client::open(url).ok()?;
        let mut connection = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        command.query(&mut connection).ok()
    }

    /// The keys on `node` whose name starts with `prefix` (empty if it does not answer).
    pub fn keys(&self, node: usize, prefix: &str) -> Vec<String> {
        self.query(node, redis::cmd("KEYS").arg(format!("{prefix}*")))
            .unwrap_or_default()
    }

    fn wait(&self, node: usize, what: &str, done: impl Fn(&Self) -> bool) {
        let started = Instant::now();
        while !done(self) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the cluster's node on port {} never {what} within 20 s",
                self.ports[node]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn spawn(port: u16, tls: Option<(u16, &ServerTls)>, replicated: bool, dir: &Path) -> Child {
    let mut command = Command::new("redis-server");
    if let Some((tls_port, tls)) = tls {
        tls.listen(tls_port, &mut command);
        command.args(["--tls-cluster", "yes"]);
    }
    if replicated {
        command.args(["--cluster-node-timeout", "2000"]);
    }
    command
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--cluster-enabled", "yes"])
        .arg("--cluster-config-file")
        .arg(dir.join(format!("nodes-{port}.conf")))
        .args(["--cluster-require-full-coverage", "no"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts")
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in 0..self.children.len() {
            self.kill(node);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `count` ports whose cluster bus port, 10 000 above, is free too. They are taken from
/// 12 000–22 767, below the kernel's ephemeral range (32 768 up) where `bind(0)` and every
/// client socket of the tests draw theirs, so neither the node nor its bus (22 000–32 767)
/// meets a port handed out meanwhile; a process-wide cursor keeps the cluster tests of one
/// binary, which run in parallel, apart.
fn node_ports(count: usize) -> Vec<u16> {
    const FIRST: u16 = 12_000;
    const SPAN: u16 = 10_768;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let _ = NEXT.compare_exchange(
        0,
        1 + (std::process::id() % 5_000) as u16,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    let ports: Vec<u16> = (0..SPAN)
        .map(|_| FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN)
        .filter(|port| free(*port) && free(port + 10_000))
        .take(count)
        .collect();
    assert_eq!(
        ports.len(),
        count,
        "free loopback ports for a Redis Cluster in {FIRST}-{}",
        FIRST + SPAN - 1
    );
    ports
}
