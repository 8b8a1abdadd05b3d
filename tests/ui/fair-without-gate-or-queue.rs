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

fn main() {
    let _ = Priority::Batch;
}
