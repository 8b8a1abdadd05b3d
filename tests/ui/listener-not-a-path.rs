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

#[derive(Debug)]
pub struct Audit;

impl resil::events::Listener for Audit {
    fn on_event(&self, _event: &resil::events::Event<'_>) {}
}

#[resilient(listener = Audit::default())]
async fn complete(model: &str) -> Result<String, Error> {
    Ok(model.to_owned())
}
fn main() {}
