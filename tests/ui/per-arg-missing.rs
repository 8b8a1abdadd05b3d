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

#[resilient(breaker = "per_modle")]
async fn complete(model: &str, prompt: &str) -> Result<String, Error> {
    Ok(format!("{model}{prompt}"))
}
fn main() {}
