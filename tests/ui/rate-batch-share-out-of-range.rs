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

#[resilient(rate = "500/min, batch 0%", priority = class)]
async fn none_for_batch(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(rate = "500/min, batch 100%", priority = class)]
async fn all_for_batch(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

fn main() {}
