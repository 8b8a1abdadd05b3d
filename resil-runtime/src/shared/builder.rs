//! [`RedisBuilder`]: a store's server or cluster, and its TLS settings, before it connects.

use std::sync::Arc;

use redis::cluster::ClusterClientBuilder;

use super::store::{redacted, Store};
use super::target::{Target, CONNECT};
use super::{global, Redis, SharedError};

/// The certificates a TLS store presents and trusts; none without feature `redis-tls`.
#[cfg(feature = "redis-tls")]
type Certificates = redis::TlsCertificates;
#[cfg(not(feature = "redis-tls"))]
type Certificates = std::convert::Infallible;

/// A Redis store to be: one server ([`Redis::builder`]) or a Redis Cluster
/// ([`Redis::cluster`]), with its TLS settings (feature `redis-tls`); [`RedisBuilder::connect`]
/// installs it as the process's store, [`RedisBuilder::open`] makes one of its own.
///
/// ```no_run
/// use resil_runtime::shared::Redis;
///
/// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
/// let store = Redis::builder("redis://127.0.0.1:6379/").open().await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a builder connects nothing until `.connect()` or `.open()`"]
pub struct RedisBuilder {
    nodes: Vec<String>,
    cluster: bool,
    #[cfg(feature = "redis-tls")]
    tls: super::tls::Tls,
}

/// The nodes with their passwords hidden, as events name them: a builder logged with `{:?}`
/// must not print the URL's credentials.
impl std::fmt::Debug for RedisBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<_> = self.nodes.iter().map(|node| redacted(node)).collect();
        let mut builder = f.debug_struct("RedisBuilder");
        builder
            .field("nodes", &nodes)
            .field("cluster", &self.cluster);
        #[cfg(feature = "redis-tls")]
        builder.field("tls", &self.tls);
        builder.finish()
    }
}

impl Redis {
    /// A store on the server at `url` (`redis://` or, with feature `redis-tls`, `rediss://`),
    /// to be given TLS settings before it connects.
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// Redis::builder("redis://10.0.0.5:6379/").connect().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: &str) -> RedisBuilder {
        RedisBuilder::new(vec![url.to_owned()], false)
    }

    /// A store on a Redis Cluster, found from any of `nodes` (each `redis://host:port` or
    /// `rediss://host:port`; one is enough, more survive one being down at startup). Each
    /// breaker and gate lives on the node that holds its hash slot; when a node dies, the
    /// breakers and gates it held decide locally until the cluster fails over, and the others
    /// keep sharing. News of openings is heard on one node at a time (a cluster's PUBLISH
    /// reaches every node), and on the next one when it goes.
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// Redis::cluster(["redis://10.0.0.5:7000", "redis://10.0.0.6:7000"])
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<I>(nodes: I) -> RedisBuilder
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let nodes = nodes.into_iter().map(|node| node.as_ref().to_owned());
        RedisBuilder::new(nodes.collect(), true)
    }
}

impl RedisBuilder {
    fn new(nodes: Vec<String>, cluster: bool) -> Self {
        RedisBuilder {
            nodes,
            cluster,
            #[cfg(feature = "redis-tls")]
            tls: super::tls::Tls::default(),
        }
    }

    /// Verifies the server's certificate against the CA certificates in the PEM file at
    /// `path` rather than the system's roots (a managed Redis's own CA, or a test's). The file
    /// is read when the store is made: missing or not PEM, it is a [`SharedError::Tls`].
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// Redis::builder("rediss://redis.internal:6380/")
    ///     .ca_file("/etc/redis/ca.pem")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "redis-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents the certificate chain in the PEM file `cert`, with its private key in `key`,
    /// to a server that asks for one (mutual TLS, `tls-auth-clients yes`).
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// Redis::builder("rediss://redis.internal:6380/")
    ///     .ca_file("/etc/redis/ca.pem")
    ///     .client_cert("/etc/redis/client.pem", "/etc/redis/client.key")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "redis-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn client_cert(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Accepts any server certificate, valid or not, for any name: the connection is
    /// encrypted but anyone on the path can pose as the server. For a test against a
    /// self-signed server only; [`RedisBuilder::ca_file`] is the fix for a certificate the
    /// system does not trust.
    ///
    /// ```no_run
    /// use resil_runtime::shared::Redis;
    ///
    /// # async fn run() -> Result<(), resil_runtime::shared::SharedError> {
    /// let store = Redis::builder("rediss://127.0.0.1:6380/")
    ///     .danger_accept_invalid_certs()
    ///     .open()
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    #[cfg(feature = "redis-tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-tls")))]
    pub fn danger_accept_invalid_certs(mut self) -> Self {
        self.tls.insecure = true;
        self
    }

    /// Makes the store and installs it as the process's, as [`Redis::connect`] does.
    pub async fn connect(self) -> Result<Redis, SharedError> {
        let (target, label) = self.target()?;
        let store = global();
        store.attach(target, label).await?;
        Ok(Redis {
            store: Arc::clone(store),
        })
    }

    /// Makes a store of its own, as [`Redis::open`] does.
    pub async fn open(self) -> Result<Redis, SharedError> {
        let (target, label) = self.target()?;
        let store = Store::new();
        store.attach(target, label).await?;
        Ok(Redis { store })
    }

    /// What to connect to, and how to name it in events (passwords hidden).
    fn target(&self) -> Result<(Target, String), SharedError> {
        let label = self.label();
        if self.nodes.is_empty() {
            return Err(SharedError::Url {
                url: label,
                reason: "no node given".to_owned(),
            });
        }
        #[cfg(feature = "redis-tls")]
        let certificates = self.tls_checked()?;
        #[cfg(not(feature = "redis-tls"))]
        let certificates: Option<Certificates> = None;
        if !self.cluster {
            let client = self.node(&self.nodes[0], certificates)?;
            let target = Target {
                nodes: vec![client],
                cluster: None,
            };
            return Ok((target, label));
        }
        // One retry: a call on a dead node's keys has shared_timeout, not a retry loop.
        let builder = ClusterClientBuilder::new(self.nodes.clone())
            .connection_timeout(CONNECT)
            .response_timeout(CONNECT)
            .retries(1);
        #[cfg(feature = "redis-tls")]
        let builder = match certificates.clone() {
            Some(certificates) => builder.certs(certificates),
            None => builder,
        };
        #[cfg(feature = "redis-tls")]
        let builder = if self.tls.insecure {
            builder.tls(redis::TlsMode::Insecure)
        } else {
            builder
        };
        let client = builder.build().map_err(|error| SharedError::Url {
            url: label.clone(),
            reason: error.to_string(),
        })?;
        let nodes = (self.nodes.iter())
            .map(|node| self.node(node, certificates.clone()))
            .collect::<Result<_, _>>()?;
        let target = Target {
            nodes,
            cluster: Some(client),
        };
        Ok((target, label))
    }

    /// The nodes as events name the store: passwords hidden, joined by commas.
    fn label(&self) -> String {
        (self.nodes.iter())
            .map(|node| redacted(node))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The TLS settings, checked: they need `rediss://`, and their files must parse.
    #[cfg(feature = "redis-tls")]
    fn tls_checked(&self) -> Result<Option<Certificates>, SharedError> {
        let tls = self.nodes.iter().any(|node| node.starts_with("rediss://"));
        if self.tls.is_set() && !self.nodes.iter().all(|node| node.starts_with("rediss://")) {
            return Err(SharedError::Url {
                url: self.label(),
                reason: "ca_file, client_cert and danger_accept_invalid_certs are TLS settings"
                    .to_owned(),
            });
        }
        if tls {
            super::tls::install_provider();
        }
        self.tls.certificates()
    }

    /// A client of one server (or cluster node).
    fn node(
        &self,
        url: &str,
        certificates: Option<Certificates>,
    ) -> Result<redis::Client, SharedError> {
        let refused = |error: redis::RedisError| SharedError::Url {
            url: redacted(url),
            reason: error.to_string(),
        };
        #[cfg(feature = "redis-tls")]
        {
            let url = if self.tls.insecure && !url.contains('#') {
                format!("{url}#insecure")
            } else {
                url.to_owned()
            };
            match certificates {
                Some(certificates) => redis::Client::build_with_tls(url, certificates),
                None => redis::Client::open(url),
            }
            .map_err(refused)
        }
        #[cfg(not(feature = "redis-tls"))]
        {
            let _ = certificates;
            redis::Client::open(url).map_err(refused)
        }
    }
}
