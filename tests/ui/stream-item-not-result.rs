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
use resil::stream::Stream;

#[derive(Debug)]
struct OtherError;

#[resilient(first_item_timeout = "20s")]
async fn chunks(prompt: &str) -> Result<impl Stream<Item = String>, Error> {
    Ok(futures::stream::iter([prompt.to_owned()]))
}

#[resilient(first_item_timeout = "20s")]
async fn other_error(prompt: &str) -> Result<impl Stream<Item = Result<String, OtherError>>, Error> {
    Ok(futures::stream::iter([Ok(prompt.to_owned())]))
}

fn main() {}
