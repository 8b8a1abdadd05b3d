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

#[resilient(first_item_timeout = "20s", commit_hold = 100)]
async fn stream_chat(prompt: &str) -> Result<impl Stream<Item = Result<String, Error>>, Error> {
    Ok(futures::stream::iter([Ok(prompt.to_owned())]))
}

fn main() {}
