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

#[resilient(profile = "lmm")]
async fn complete(model: &str) -> Result<String, Error> {
    Ok(model.to_owned())
}
fn main() {}
