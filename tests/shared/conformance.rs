//! The conformance suite (`resil::shared::conformance`) against a real Redis: each instance is
//! a store of its own (a connection and a subscription, as a process would have).

use super::*;
use resil::shared::conformance;

#[tokio::test]
async fn redis_conforms() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    conformance::run(|| {
        let url = url.clone();
        async move { Redis::open(&url).await.expect("a Redis URL") }
    })
    .await;
}
