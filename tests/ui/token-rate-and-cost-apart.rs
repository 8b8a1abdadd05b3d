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
    max_tokens: u32,
}

#[resilient(token_rate = "90000/min")]
async fn without_cost(req: &Request) -> Result<u32, Error> {
    Ok(req.max_tokens)
}

#[resilient(rate_cost = req.max_tokens)]
async fn without_gate(req: &Request) -> Result<u32, Error> {
    Ok(req.max_tokens)
}

fn main() {}
