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

struct Chunk(String);

impl Chunk {
    fn text(&self) -> &str {
        &self.0
    }
}

#[resilient(first_item_timeout = "20s", complete_when = Chunk::text)]
async fn stream_chat(prompt: &str) -> Result<impl Stream<Item = Result<Chunk, Error>>, Error> {
    Ok(futures::stream::iter([Ok(Chunk(prompt.to_owned()))]))
}

fn main() {}
