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

use resil::{resilient, Priority};

#[resilient(rate = "500/min, batch 0%", priority = class)]
async fn none_for_batch(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(rate = "500/min, batch 100%", priority = class)]
async fn all_for_batch(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(rate = "500/min, batch 80%")]
async fn no_class() -> Result<(), Error> {
    Ok(())
}

#[resilient(token_rate = "40000/min, batch 80%", rate_cost = 10)]
async fn token_share_no_class() -> Result<(), Error> {
    Ok(())
}

#[resilient(token_rate = "40000/min, batch 80%", learn = true, rate_cost = 10, priority = class)]
async fn learning_token_share(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(rate = "500/min, batch 80%", learn = true, priority = class)]
async fn learning_share(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

#[resilient(token_rate = "40000/min, batch 80% per key", key = model, rate_cost = 10, priority = class)]
async fn token_share_per_key(model: &str, class: Priority) -> Result<(), Error> {
    let _ = (model, class);
    Ok(())
}

#[resilient(rate = "10/s, batch 50% per key", key = model, bulkhead = 2, bulkhead_queue = 4, priority = class)]
async fn share_per_key(model: &str, class: Priority) -> Result<(), Error> {
    let _ = (model, class);
    Ok(())
}

#[resilient(token_rate = "40000/min, batch 80%", shared = true, rate_cost = 10, priority = class)]
async fn shared_token_share(class: Priority) -> Result<(), Error> {
    let _ = class;
    Ok(())
}

fn main() {}
