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

#[resilient(timeout = "5s", learn = true)]
async fn nothing_to_learn() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "auto, burst 5")]
async fn auto_with_a_burst() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "auto")]
async fn learns() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "10/s", learn = true)]
async fn learns_under_a_ceiling() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "auto", learn = "yes")]
async fn not_a_flag() -> Result<(), Error> {
    Ok(())
}

fn main() {}
