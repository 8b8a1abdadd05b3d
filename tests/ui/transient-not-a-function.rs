use resil::resilient;

#[derive(Debug)]
struct Status;

impl From<resil::Rejected> for Status {
    fn from(_: resil::Rejected) -> Self {
        Status
    }
}

const RETRYABLE: bool = true;

#[resilient(retry = 2, transient = RETRYABLE)]
async fn call() -> Result<u32, Status> {
    Ok(1)
}

#[resilient(retry = 2, transient = "is_retryable")]
async fn call_named() -> Result<u32, Status> {
    Ok(1)
}

fn main() {}
