use resil::resilient;

/// An error type of another crate: no `Transient`, no `From<resil::Rejected>`.
#[derive(Debug)]
struct Status {
    code: u16,
}

fn is_retryable(status: &Status) -> bool {
    status.code == 503
}

#[resilient(retry = 2, transient = is_retryable)]
async fn call() -> Result<u32, Status> {
    Ok(1)
}

fn main() {}
