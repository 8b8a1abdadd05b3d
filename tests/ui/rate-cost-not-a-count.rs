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

struct Request {
    prompt: String,
}

#[resilient(token_rate = "90000/min", rate_cost = req.prompt.clone())]
async fn complete(req: &Request) -> Result<String, Error> {
    Ok(req.prompt.clone())
}

fn main() {}
