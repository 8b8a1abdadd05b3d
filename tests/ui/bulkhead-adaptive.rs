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

#[resilient(bulkhead = "adaptive 0..4")]
async fn down_to_zero() -> Result<u32, Error> {
    Ok(1)
}

#[resilient(bulkhead = "adaptive 8..4")]
async fn backwards() -> Result<u32, Error> {
    Ok(1)
}

#[resilient(bulkhead = "adaptive 4-64")]
async fn dash() -> Result<u32, Error> {
    Ok(1)
}

#[resilient(bulkhead = "adaptiv")]
async fn misspelt() -> Result<u32, Error> {
    Ok(1)
}
fn main() {}
