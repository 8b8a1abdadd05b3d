//! The same outage (20 callers, every completion answered 503 with `Retry-After: 1`) through
//! the attribute, a tower layer and a reqwest middleware: the provider sees the same requests
//! each way. Over loopback, real time: about 12 s.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

use resil_lab::interop::{run, through_attribute, through_middleware};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_paths_make_the_same_requests() {
    let requests = |rows: Vec<resil_lab::interop::Row>| -> Vec<u32> {
        rows.iter().map(|row| row.requests).collect()
    };
    let attribute = requests(through_attribute().await.unwrap());
    assert_eq!(attribute, [20, 60, 20]);
    assert_eq!(requests(run().await.unwrap()), attribute, "tower");
    assert_eq!(
        requests(through_middleware().await.unwrap()),
        attribute,
        "middleware"
    );
}
