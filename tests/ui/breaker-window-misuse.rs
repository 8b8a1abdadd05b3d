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

#[resilient(breaker = "a", breaker_kind = "failure_rate", breaker_window = "30 parsecs")]
async fn not_a_duration() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "b", breaker_kind = "failure_rate", breaker_window = 30.5)]
async fn neither_calls_nor_time() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "c", breaker_kind = "failure_rate", breaker_window = "500ms")]
async fn under_a_second() -> Result<(), Error> {
    Ok(())
}

#[resilient(
    breaker = "d",
    breaker_kind = "failure_rate",
    breaker_window = "10s",
    breaker_min_calls = 20,
    rate = "1/s"
)]
async fn minimum_past_the_rate() -> Result<(), Error> {
    Ok(())
}

fn main() {}
