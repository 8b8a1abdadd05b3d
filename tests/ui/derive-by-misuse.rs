use std::time::Duration;

#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(by = status, throttle)]
    Status { status: resil::http::StatusCode },
    #[transient(by = code)]
    Other { status: resil::http::StatusCode, wait: Duration },
}

fn main() {}
