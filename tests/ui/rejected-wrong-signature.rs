use resil::{resilient, Rejected};

/// An error type of another crate: no `Transient`, no `From<resil::Rejected>`.
#[derive(Debug)]
struct Status;

fn is_retryable(_: &Status) -> bool {
    true
}

fn to_message(rejected: Rejected) -> String {
    rejected.to_string()
}

fn from_a_code(_: u16) -> Status {
    Status
}

#[resilient(retry = 2, transient = is_retryable, rejected = to_message)]
async fn call() -> Result<u32, Status> {
    Ok(1)
}

#[resilient(retry = 2, transient = is_retryable, rejected = from_a_code)]
async fn call_coded() -> Result<u32, Status> {
    Ok(1)
}

fn main() {}
