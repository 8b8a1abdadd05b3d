use async_trait::async_trait;
use resil::{resilient, Rejected, Transient};

#[derive(Debug, Transient)]
enum Error {
    #[transient(transparent)]
    Rejected(Rejected),
}

impl From<Rejected> for Error {
    fn from(rejected: Rejected) -> Self {
        Error::Rejected(rejected)
    }
}

#[async_trait]
trait Provider {
    async fn complete(&self, prompt: &str) -> Result<String, Error>;
}

struct OpenAi;

// The attribute goes on the method inside, not on the block.
#[resilient(timeout = "20s", retry = 2)]
#[async_trait]
impl Provider for OpenAi {
    async fn complete(&self, prompt: &str) -> Result<String, Error> {
        Ok(prompt.to_owned())
    }
}

fn main() {}
