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

#[resilient(key = "model", breaker = "per_key")]
async fn literal(model: &str) -> Result<String, Error> {
    Ok(model.to_owned())
}

#[resilient(key = (a, b, c, d, e), breaker = "per_key")]
async fn five(a: u8, b: u8, c: u8, d: u8, e: u8) -> Result<u8, Error> {
    Ok(a + b + c + d + e)
}
fn main() {}
