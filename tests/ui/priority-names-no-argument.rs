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

#[resilient(rate = "10/s", priority = clas)]
async fn misspelt(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(rate = "10/s", priority = req.class)]
async fn a_field(req: (Priority,)) -> Result<(), Error> {
    let _ = req;
    Ok(())
}

fn main() {}
