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

#[resilient(retry = 2, retry_budget = "twenty percent")]
async fn fetch() -> Result<u32, Error> {
    Ok(1)
}

fn main() {}
