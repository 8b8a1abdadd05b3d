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

#[resilient(rate = "60 per minute")]
async fn worded() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "0/s")]
async fn zero() -> Result<(), Error> {
    Ok(())
}

#[resilient(token_rate = "1000/min, burst 0")]
async fn no_burst() -> Result<(), Error> {
    Ok(())
}

fn main() {}
