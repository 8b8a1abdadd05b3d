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

#[resilient(
    breaker = "a",
    breaker_kind = "failure_rate",
    breaker_window = 20,
    shared = true
)]
async fn counts_one_instance_s_calls() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "b", breaker_kind = "failure_rate", shared = true)]
async fn the_default_window_counts_calls_too() -> Result<(), Error> {
    Ok(())
}

#[resilient(
    breaker = "c",
    breaker_kind = "failure_rate",
    breaker_window = "30s",
    shared = true
)]
async fn a_window_of_time_is_shared() -> Result<(), Error> {
    Ok(())
}

fn main() {}
