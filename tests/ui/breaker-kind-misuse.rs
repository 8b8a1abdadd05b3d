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

#[resilient(breaker = "a", breaker_kind = "failure_rate", breaker_threshold = 3)]
async fn threshold_with_rate() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "b", breaker_kind = "slow_call")]
async fn slow_without_slow() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "c", breaker_rate = "25%")]
async fn rate_with_consecutive() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "d", breaker_kind = "failure_rate", breaker_window = 5, breaker_min_calls = 10)]
async fn window_below_minimum() -> Result<(), Error> {
    Ok(())
}

#[resilient(breaker = "e", breaker_kind = "falure_rate")]
async fn typo() -> Result<(), Error> {
    Ok(())
}

fn main() {}
