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

use resil::resilient;

#[resilient(bulkhead_queue = 16)]
async fn without_bulkhead() -> Result<(), Error> {
    Ok(())
}

#[resilient(bulkhead = 8, bulkhead_queue = 0)]
async fn empty_queue() -> Result<(), Error> {
    Ok(())
}

fn main() {}
