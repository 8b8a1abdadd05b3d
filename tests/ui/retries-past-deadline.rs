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

#[resilient(timeout = "1s", deadline = "2s", retry = 3, backoff = "1s..4s", jitter = "none")]
async fn charge() -> Result<(), Error> {
    Ok(())
}
fn main() {}
