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

#[resilient(timeout = "1s", shared = true)]
async fn nothing_to_share() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "10/s", shared_timeout = "20ms", shared_fail = "closed")]
async fn tuned_but_not_shared() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "10/s", shared = true, shared_fail = "sometimes")]
async fn unknown_failure_mode() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "openai", shared = true, shared_timeout = "5s")]
async fn waits_too_long_for_redis() -> Result<(), Error> {
    Ok(())
}

#[resilient(rate = "10/s", shared = "yes")]
async fn not_a_flag() -> Result<(), Error> {
    Ok(())
}

fn main() {}
