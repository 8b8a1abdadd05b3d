use resil::{resilient, Rejected, Transient};

#[derive(Debug, Transient)]
enum LlmError {
    #[transient(transparent)]
    Rejected(Rejected),
}

impl From<Rejected> for LlmError {
    fn from(rejected: Rejected) -> Self {
        LlmError::Rejected(rejected)
    }
}

#[resilient(retry = 2, route = modle in ["claude-sonnet"])]
async fn names_no_argument(model: &str) -> Result<String, LlmError> {
    Ok(model.to_owned())
}

#[resilient(retry = 2, breaker = "per_region", route = model in ["claude-sonnet"])]
async fn keyed_by_another_argument(model: &str, region: &str) -> Result<String, LlmError> {
    Ok(format!("{model} {region}"))
}

#[resilient(retry = 2, route = ["claude-sonnet"])]
async fn no_argument_named(model: &str) -> Result<String, LlmError> {
    Ok(model.to_owned())
}

#[derive(Debug, Transient)]
enum Refusal {
    #[transient(route, throttle)]
    ContextTooLong,
}

fn main() {}
