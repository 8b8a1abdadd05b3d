use resil::{resilient, Rejected, Transient};

#[derive(Debug)]
struct Status;

impl Transient for Status {
    fn is_transient(&self) -> bool {
        false
    }
}

fn to_status(_: Rejected) -> Status {
    Status
}

#[resilient(retry = 2, rejected = to_status)]
async fn call() -> Result<u32, Status> {
    Ok(1)
}

fn main() {}
