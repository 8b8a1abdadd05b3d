use resil::{resilient, Rejected};

#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(transparent)]
    Rejected(Rejected),
}

impl From<Rejected> for Error {
    fn from(rejected: Rejected) -> Self {
        Error::Rejected(rejected)
    }
}

#[resilient(breaker = per_model)]
async fn complete(model: &str) -> Result<String, Error> {
    Ok(model.to_owned())
}

fn main() {}
