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

#[resilient(rate = "10/s", priority = class)]
async fn a_string(class: String) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

fn main() {
    let _ = Priority::Batch;
}
