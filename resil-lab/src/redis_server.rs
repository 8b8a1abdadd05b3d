//! A real `redis-server` on 127.0.0.1, for the tests and the `two_instances` example: started
//! on a free port with nothing persisted, killed and restarted on demand, stopped when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` process of this test or example.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// A port for TLS beside the plain one (which the test's own looks use), and its files.
    tls: Option<(u16, ServerTls)>,
}

/// What a server needs for TLS: its certificate and key, the CA that signs its clients'
/// certificates, and whether it asks clients for one (mutual TLS).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA clients' certificates must come from (PEM).
    pub ca: PathBuf,
    /// `--tls-auth-clients yes`: a client without a certificate from `ca` is refused.
    pub auth_clients: bool,
}

impl ServerTls {
    /// Has `command` (a `redis-server`) listen for TLS on `port` with these files.
    pub(crate) fn listen(&self, port: u16, command: &mut Command) {
        command
            .args(["--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&self.cert)
            .arg("--tls-key-file")
            .arg(&self.key)
            .arg("--tls-ca-cert-file")
            .arg(&self.ca)
            .args([
                "--tls-auth-clients",
                if self.auth_clients { "yes" } else { "no" },
            ]);
    }
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers.
    ///
    /// Without a `redis-server` binary this panics with how to install it, so that a green
    /// run means the Redis tests ran; `RESIL_SKIP_REDIS=1` opts out, and then it returns
    /// `None` for the caller to skip.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(None)
    }

    /// [`RedisServer::start`], also listening for TLS on a second port
    /// ([`RedisServer::tls_url`]) with `tls`'s files; the plain port stays for the test's own
    /// looks ([`RedisServer::query`]).
    pub fn start_tls(tls: ServerTls) -> Option<RedisServer> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<ServerTls>) -> Option<RedisServer> {
        if !Self::installed() {
            let advice = "redis-server is not installed: `apt-get install -y redis-server` (or your system's package) runs the Redis tests";
            let skip = std::env::var_os("RESIL_SKIP_REDIS");
            if !skip.is_some_and(|value| !value.is_empty() && value != "0") {
                panic!("{advice}, or set RESIL_SKIP_REDIS=1 to skip them");
            }
            eprintln!("\n*** SKIPPED (RESIL_SKIP_REDIS): {advice} ***\n");
            return None;
        }
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("resil-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis-server");
        let mut server = RedisServer {
            port,
            dir,
            child: None,
            tls: tls.map(|tls| (free_port(), tls)),
        };
        server.restart();
        Some(server)
    }

    /// Whether a `redis-server` binary is on the path.
    pub fn installed() -> bool {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok()
    }

    /// `redis://127.0.0.1:{port}/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `rediss://127.0.0.1:{tls port}/`, for a server started by [`RedisServer::start_tls`].
    pub fn tls_url(&self) -> String {
        let (port, _) = self.tls.as_ref().expect("a server started with start_tls");
        format!("rediss://127.0.0.1:{port}/")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server at once (SIGKILL: no goodbye to its clients) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let mut command = Command::new("redis-server");
        if let Some((port, tls)) = &self.tls {
            tls.listen(*port, &mut command);
        }
        let child = command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let started = Instant::now();
        while !self.answers() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not answer within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it answers PING now.
    pub fn answers(&self) -> bool {
        self.query::<String>(&redis::cmd("PING")).is_some()
    }

    /// Runs one command on a connection of its own (redis-rs, blocking), for a test's look at
    /// the server or a fault (`DEBUG SLEEP 1`). `None` if the server does not answer.
    pub fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Option<T> {
        self.try_query(command).ok()
    }

    /// [`RedisServer::query`], with the error when the server does not answer or refuses.
    pub fn try_query<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut connection = client.get_connection_with_timeout(Duration::from_secs(1))?;
        command.query(&mut connection)
    }

    /// The keys whose name starts with `prefix`.
    ///
    /// Panics, with the error, if the server does not answer: "no key left" must not pass
    /// because nobody could look.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.try_query(redis::cmd("KEYS").arg(format!("{prefix}*")))
            .unwrap_or_else(|error| {
                panic!("KEYS {prefix}* on redis-server port {}: {error}", self.port)
            })
    }
}

/// A port on 127.0.0.1 free now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How long [`settled`] waits: what several instances and a Redis server reach within
/// milliseconds, given a loaded 2-core machine's worst.
pub const SETTLE_WITHIN: Duration = Duration::from_secs(15);

/// Waits, polling every 10 ms, until `done` holds (`true`) or [`SETTLE_WITHIN`] has passed
/// (`false`): the one wait of the Redis tests and the `two_instances` example, which each
/// say loudly what never happened.
pub async fn settled(done: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > SETTLE_WITHIN {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}
