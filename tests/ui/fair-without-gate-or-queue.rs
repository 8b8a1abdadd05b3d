#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(transparent)]
    Rejected(resil::Rejected),
}

impl From<resil::Rejected> for Error {
    fn from(rejected: resil::Rejected) -> Self {
        Error::Rejected(rejected)
    }
}

use resil::{resilient, Priority};

#[resilient(timeout = "1s", priority = class)]
async fn nobody_waits(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(bulkhead = 8, fair = tenant)]
async fn no_queue(tenant: &str) -> Result<(), Error> {
    let _ = tenant;
    Ok(())
}

#[resilient(token_rate = "auto", shared = true, rate_cost = 10, fair = tenant)]
async fn shared_learning_token_gate_alone(tenant: &str) -> Result<(), Error> {
    let _ = tenant;
    Ok(())
}

struct Tenant;

#[resilient(rate = "10/s", fair = tenant)]
async fn not_hashable(tenant: Tenant) -> Result<(), Error> {
    let _ = tenant;
    Ok(())
}

#[resilient(rate = "10/s", learn = true, shared = true, priority = class)]
async fn shared_learning_gate(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

fn main() {
    let _ = Priority::Batch;
}
