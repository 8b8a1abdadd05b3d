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

pub struct Request {
    pub temperature: f32,
}

#[resilient(key = req.temperature, breaker = "per_key")]
async fn complete(req: &Request) -> Result<f32, Error> {
    Ok(req.temperature)
}
fn main() {}
