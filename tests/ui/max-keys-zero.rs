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

#[resilient(breaker = "per_model", max_keys = 0)]
async fn keyed(model: &str) -> Result<u32, Error> {
    Ok(model.len() as u32)
}

fn main() {}
