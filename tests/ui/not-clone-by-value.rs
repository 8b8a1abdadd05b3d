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
    body: Vec<u8>,
}

#[resilient(retry = 2)]
async fn send(request: Request) -> Result<usize, Error> {
    Ok(request.body.len())
}
fn main() {}
