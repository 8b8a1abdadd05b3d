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

#[resilient(timeout = "1s", retry_after_max = "10s")]
async fn fetch() -> Result<u32, Error> {
    Ok(1)
}

fn main() {}
