//! Shared state over TLS (`rediss://`, feature `redis-tls`) through a real `redis-server`
//! with certificates made here: a CA, a server certificate for 127.0.0.1 and localhost, a
//! client certificate, and a second CA that signed none of them.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use resil::shared::SharedError;
use resil_lab::redis_cluster::RedisCluster;
use resil_lab::redis_server::ServerTls;

use super::cluster::{
    breaker_in, breaker_key, gate_in, gate_key, name_on, one_between, opening_reaches,
};
use super::*;

/// The files of one test, in a directory of its own (removed when dropped).
struct Certificates {
    dir: PathBuf,
}

impl Certificates {
    fn new(name: &str) -> Certificates {
        let dir = std::env::temp_dir().join(format!("resil-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
        };
        let (ca, other) = (ca("resil test CA"), ca("another CA"));
        let write = |file: &str, text: String| std::fs::write(dir.join(file), text).unwrap();
        write("ca.pem", ca.pem());
        write("other-ca.pem", other.pem());
        for (name, names) in [
            (
                "server",
                vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            ),
            ("client", vec!["resil-client".to_owned()]),
        ] {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(names)
                .unwrap()
                .signed_by(&key, &ca)
                .unwrap();
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}.key"), key.serialize_pem());
        }
        write("garbage.pem", "not a certificate\n".to_owned());
        Certificates { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn server(&self, auth_clients: bool) -> ServerTls {
        ServerTls {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            ca: self.path("ca.pem"),
            auth_clients,
        }
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the global listener heard a store (by its URL) say about its outages.
#[derive(Debug, Default)]
struct Reasons {
    url: String,
    said: Mutex<Vec<String>>,
}

impl Listener for Reasons {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::SharedUnavailable { store, reason } = event {
            if *store == self.url {
                self.said.lock().unwrap().push((*reason).to_owned());
            }
        }
    }
}

fn reasons(url: &str) -> Arc<Reasons> {
    let reasons = Arc::new(Reasons {
        url: url.to_owned(),
        said: Mutex::default(),
    });
    events::add_global_listener(Arc::clone(&reasons) as Arc<dyn Listener>);
    reasons
}

async fn store(url: &str, ca: &Path) -> Redis {
    Redis::builder(url).ca_file(ca).open().await.unwrap()
}

#[tokio::test]
async fn a_shared_breaker_and_gate_work_through_rediss_with_a_ca_file() {
    let files = Certificates::new("shared");
    let Some(server) = RedisServer::start_tls(files.server(false)) else {
        return;
    };
    let url = server.tls_url();
    let gated = |p: resil::PolicyBuilder| {
        p.rate(1, Duration::from_secs(60), 1)
            .deadline(Duration::from_secs(1))
            .shared_timeout(Duration::from_secs(1))
    };
    let (a, b) = (
        instance_in(store(&url, &files.path("ca.pem")).await, gated),
        instance_in(store(&url, &files.path("ca.pem")).await, gated),
    );
    assert!(a.store.is_available() && b.store.is_available());
    assert_eq!(a.store.last_error(), None);
    let calls = Calls::default();
    assert_eq!(call(&a.policy, &calls, Ok(())).await, Ok(()));
    assert!(
        matches!(
            call(&b.policy, &calls, Ok(())).await,
            Err(ApiError::Rejected(Rejected::RateLimited { .. }))
        ),
        "one a minute across both instances, through TLS"
    );
    assert_eq!(calls.count(), 1);
    // The breaker: a's opening reaches b, over the TLS subscription.
    let breakers =
        |store: &Redis| instance_in(store.clone(), |p| p.shared_timeout(Duration::from_secs(1)));
    let (a, b) = (breakers(&a.store), breakers(&b.store));
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("b opens through TLS", || {
        b.breaker.state() == BreakerState::Open
    })
    .await;
    assert_eq!(server.keys("resil:{breaker:provider}").len(), 1);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_saying_so() {
    let files = Certificates::new("other-ca");
    let Some(server) = RedisServer::start_tls(files.server(false)) else {
        return;
    };
    let url = server.tls_url();
    let heard = reasons(&url);
    let refused = store(&url, &files.path("other-ca.pem")).await;
    assert!(!refused.is_available(), "the handshake is refused");
    let reason = refused.last_error().expect("the reason is kept");
    for needed in ["invalid peer certificate", "ca_file", "host name"] {
        assert!(reason.contains(needed), "{needed} in {reason}");
    }
    assert!(
        heard.said.lock().unwrap().contains(&reason),
        "the event said it: {:?}",
        heard.said
    );
    // The instance still runs: its breaker and gate decide locally.
    let local = instance_in(refused, |p| p.rate(1, Duration::from_secs(60), 1));
    let calls = Calls::default();
    assert_eq!(call(&local.policy, &calls, Ok(())).await, Ok(()));
    assert_eq!(calls.count(), 1);
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let files = Certificates::new("mutual");
    let Some(server) = RedisServer::start_tls(files.server(true)) else {
        return;
    };
    let url = server.tls_url();
    let with = Redis::builder(&url)
        .ca_file(files.path("ca.pem"))
        .client_cert(files.path("client.pem"), files.path("client.key"))
        .open()
        .await
        .unwrap();
    assert!(with.is_available(), "{:?}", with.last_error());
    let a = instance_in(with, |p| p.shared_timeout(Duration::from_secs(1)));
    let calls = Calls::default();
    for _ in 0..2 {
        let _ = call(&a.policy, &calls, Err(ApiError::Busy)).await;
    }
    eventually("the opening is in Redis", || {
        server.keys("resil:{breaker:").len() == 1
    })
    .await;

    let without = store(&url, &files.path("ca.pem")).await;
    let refused = settled(|| without.last_error().is_some()).await;
    assert!(refused && !without.is_available());
    let reason = without.last_error().unwrap();
    assert!(reason.contains("client_cert"), "{reason}");
}

#[tokio::test]
async fn tls_files_that_are_missing_or_not_pem_are_refused_at_once() {
    let files = Certificates::new("files");
    let url = "rediss://127.0.0.1:1/";
    let missing = Redis::builder(url)
        .ca_file(files.path("nowhere.pem"))
        .open()
        .await;
    assert!(
        matches!(&missing, Err(SharedError::Tls { reason, .. }) if reason.contains("PEM file this process can read")),
        "{missing:?}"
    );
    let garbage = Redis::builder(url)
        .ca_file(files.path("garbage.pem"))
        .open()
        .await;
    assert!(
        matches!(&garbage, Err(SharedError::Tls { reason, .. }) if reason.contains("no certificate")),
        "{garbage:?}"
    );
    let key_as_cert = Redis::builder(url)
        .client_cert(files.path("client.pem"), files.path("client.pem"))
        .open()
        .await;
    assert!(
        matches!(&key_as_cert, Err(SharedError::Tls { reason, .. }) if reason.contains("private key")),
        "{key_as_cert:?}"
    );
    let plain = Redis::builder("redis://127.0.0.1:1/")
        .ca_file(files.path("ca.pem"))
        .open()
        .await;
    assert!(
        matches!(&plain, Err(SharedError::Url { reason, .. }) if reason.contains("TLS settings")),
        "{plain:?}"
    );
    let message = garbage.unwrap_err().to_string();
    assert!(message.contains("garbage.pem"), "{message}");
}

#[cfg(feature = "conformance")]
#[tokio::test]
async fn redis_over_tls_conforms() {
    let files = Certificates::new("conformance");
    let Some(server) = RedisServer::start_tls(files.server(false)) else {
        return;
    };
    let (url, ca) = (server.tls_url(), files.path("ca.pem"));
    resil::shared::conformance::run(|| store(&url, &ca)).await;
}

#[tokio::test]
async fn a_client_key_that_is_not_the_certificates_is_refused_saying_so() {
    let files = Certificates::new("mismatch");
    let Some(server) = RedisServer::start_tls(files.server(true)) else {
        return;
    };
    let url = server.tls_url();
    let opened = Redis::builder(&url)
        .ca_file(files.path("ca.pem"))
        .client_cert(files.path("client.pem"), files.path("server.key"))
        .open()
        .await;
    let reason = match opened {
        Err(error) => error.to_string(),
        Ok(store) => {
            assert!(settled(|| store.last_error().is_some()).await, "silent");
            assert!(!store.is_available());
            store.last_error().unwrap()
        }
    };
    assert!(
        reason.contains("client_cert") || reason.contains("key"),
        "no fix said: {reason}"
    );
}

/// A cluster whose clients and bus speak TLS, as managed services run it: breakers and gates
/// whose keys live on each of the three nodes are shared, the news of an opening reaches the
/// other instance over the TLS subscription, and the store conforms.
#[tokio::test]
async fn a_cluster_over_tls_shares_on_every_node() {
    let files = Certificates::new("cluster");
    let Some(cluster) = RedisCluster::start_tls(files.server(false)) else {
        return;
    };
    let (urls, ca) = (cluster.tls_urls(), files.path("ca.pem"));
    let open = || Redis::cluster(&urls).ca_file(&ca).open();
    let (a, b) = (open().await.unwrap(), open().await.unwrap());
    assert!(a.is_available() && b.is_available(), "{:?}", a.last_error());
    for node in 0..3 {
        let breaker = name_on(&cluster, node, "tls::breaker", breaker_key);
        assert!(
            opening_reaches(&breaker_in(&a, &breaker), &breaker_in(&b, &breaker)).await,
            "an opening on node {node} reaches the other instance"
        );
        let gate = name_on(&cluster, node, "tls::gate", gate_key);
        assert!(
            one_between(&gate_in(&a, &gate), &gate_in(&b, &gate)).await,
            "a gate on node {node} is shared"
        );
    }
    assert_eq!((a.last_error(), b.last_error()), (None, None));
    #[cfg(feature = "conformance")]
    resil::shared::conformance::run(|| async { open().await.unwrap() }).await;
}
