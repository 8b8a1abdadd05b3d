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
    pub model: String,
}

#[resilient(key = req.model, breaker = "per_model")]
async fn two_keys(req: &Request, model: &str) -> Result<String, Error> {
    Ok(format!("{}{model}", req.model))
}

#[resilient(breaker = "per_key")]
async fn no_key(model: &str) -> Result<String, Error> {
    Ok(model.to_owned())
}
fn main() {}
