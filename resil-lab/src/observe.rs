//! A service that shows what its policies do: an HTTP service on 127.0.0.1 whose handler
//! calls an annotated client against the mock provider. `/metrics` serves the Prometheus text
//! of `metrics-exporter-prometheus`, `/health` the breaker snapshot ([`resil::breakers`]) as
//! JSON, and `/admin/force_open?breaker=NAME` and `/admin/reset?breaker=NAME` act on a
//! breaker. [`run`] drives an outage through it and returns what both endpoints showed before,
//! during and after it. Real time: about 3 seconds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use resil::http::classify;
use resil::resilient;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::mock::MockProvider;
use crate::ApiError;

/// The client the service's handler calls: a breaker per model that opens after 3 failures
/// and probes after 2 s, one retry.
#[derive(Debug)]
pub struct Backend {
    http: reqwest::Client,
    base: String,
}

impl Backend {
    /// One completion for `model`.
    #[resilient(
        timeout = "1s",
        retry = 1,
        backoff = "10ms..20ms",
        key = model,
        breaker = "per_key",
        breaker_threshold = 3,
        breaker_cooldown = "2s"
    )]
    pub async fn complete(&self, model: &str) -> Result<String, ApiError> {
        let url = format!("{}/v1/chat/completions?tokens=2", self.base);
        let response = self.http.post(url).send().await?;
        Ok(classify(response).await?.text().await?)
    }
}

/// What `/health` and `/metrics` showed at one point of the outage.
#[derive(Debug, Clone)]
pub struct Phase {
    /// When.
    pub name: &'static str,
    /// Requests answered 200 by the service in this phase, of those sent.
    pub answered: usize,
    /// Requests sent in this phase.
    pub sent: usize,
    /// `/health`, as served.
    pub health: String,
    /// The `resil_*` series of `/metrics` (counters and gauges; summaries left out).
    pub metrics: Vec<String>,
}

/// Starts the mock provider and the service, installs the Prometheus recorder (once per
/// process), and drives them through an outage of the model `gpt`.
pub async fn run() -> std::io::Result<Vec<Phase>> {
    let prometheus = PrometheusBuilder::new()
        .install_recorder()
        .map_err(std::io::Error::other)?;
    let provider = MockProvider::with_capacity(u32::MAX, 1).await?;
    let backend = Backend {
        http: reqwest::Client::new(),
        base: provider.url(""),
    };
    let service = serve(Arc::new(backend), prometheus).await?;
    let client = reqwest::Client::new();
    let base = format!("http://{service}");
    let get = |path: String| {
        let client = client.clone();
        async move {
            let response = client
                .get(path)
                .send()
                .await
                .map_err(std::io::Error::other)?;
            let ok = response.status() == StatusCode::OK;
            let text = response.text().await.map_err(std::io::Error::other)?;
            Ok::<_, std::io::Error>((ok, text))
        }
    };
    let drive = |models: Vec<&'static str>| {
        let get = &get;
        let base = &base;
        async move {
            let calls = models
                .into_iter()
                .map(|model| get(format!("{base}/complete?model={model}")));
            let results = futures::future::join_all(calls).await;
            let answered = results
                .iter()
                .filter(|r| matches!(r, Ok((true, _))))
                .count();
            (answered, results.len())
        }
    };
    let observe = |name: &'static str, (answered, sent): (usize, usize)| {
        let get = &get;
        let base = &base;
        async move {
            let (_, health) = get(format!("{base}/health")).await?;
            let (_, metrics) = get(format!("{base}/metrics")).await?;
            Ok::<_, std::io::Error>(Phase {
                name,
                answered,
                sent,
                health,
                metrics: resil_series(&metrics),
            })
        }
    };

    let mut phases = Vec::new();
    let traffic = drive(vec!["gpt", "gpt", "gpt", "claude", "claude"]).await;
    phases.push(observe("before: both models healthy", traffic).await?);

    provider.set_down(true);
    let traffic = drive(vec!["gpt"; 10]).await;
    phases.push(observe("during: gpt down, its breaker opens", traffic).await?);

    provider.set_down(false);
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let traffic = drive(vec!["gpt", "gpt", "gpt"]).await;
    phases.push(observe("after: cooldown over, a probe closes it", traffic).await?);

    get(format!("{base}/admin/force_open?breaker=model%3Dclaude")).await?;
    let traffic = drive(vec!["claude", "claude"]).await;
    phases.push(observe("maintenance: an operator forced claude open", traffic).await?);
    get(format!("{base}/admin/reset?breaker=model%3Dclaude")).await?;

    provider.stop().await;
    Ok(phases)
}

/// The `resil_*` counters and gauges of a Prometheus page; zero counters and the operation
/// time's summary are left out.
fn resil_series(page: &str) -> Vec<String> {
    page.lines()
        .filter(|line| line.starts_with("resil_") && !line.starts_with("resil_operation_seconds"))
        .filter(|line| !(line.contains("_total") && line.ends_with(" 0")))
        .map(str::to_owned)
        .collect()
}

/// Serves the service on an ephemeral port of 127.0.0.1 until the runtime ends.
async fn serve(backend: Arc<Backend>, prometheus: PrometheusHandle) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let (backend, prometheus) = (Arc::clone(&backend), prometheus.clone());
            connections.spawn(async move {
                let service = service_fn(move |request| {
                    handle(Arc::clone(&backend), prometheus.clone(), request)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn handle(
    backend: Arc<Backend>,
    prometheus: PrometheusHandle,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let query = |key: &str| {
        let query = request.uri().query().unwrap_or_default();
        query.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            (name == key).then(|| value.replace("%3D", "="))
        })
    };
    let (status, body) = match request.uri().path() {
        "/complete" => match backend.complete(&query("model").unwrap_or_default()).await {
            Ok(answer) => (StatusCode::OK, answer),
            Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()),
        },
        "/metrics" => (StatusCode::OK, prometheus.render()),
        "/health" => (StatusCode::OK, health()),
        path @ ("/admin/force_open" | "/admin/reset") => {
            match query("breaker").and_then(|name| resil::breaker::find(&name)) {
                Some(breaker) if path.ends_with("reset") => {
                    breaker.reset();
                    (StatusCode::OK, breaker.name().to_owned())
                }
                Some(breaker) => {
                    breaker.force_open();
                    (StatusCode::OK, breaker.name().to_owned())
                }
                None => (StatusCode::NOT_FOUND, "no such breaker".to_owned()),
            }
        }
        _ => (StatusCode::NOT_FOUND, "no such endpoint".to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

/// Every breaker, as JSON.
fn health() -> String {
    let breakers: Vec<_> = resil::breakers()
        .into_iter()
        .map(|status| {
            serde_json::json!({
                "name": &*status.name,
                "key": status.key,
                "state": status.state.to_string(),
                "failures": status.failures,
                // Forced open: no probe until an operator resets it.
                "retry_in_ms": (!status.forced_open).then_some(status.retry_in.as_millis() as u64),
                "forced_open": status.forced_open,
            })
        })
        .collect();
    serde_json::json!({ "breakers": breakers }).to_string()
}
