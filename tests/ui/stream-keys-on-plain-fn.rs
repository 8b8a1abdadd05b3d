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

#[resilient(first_item_timeout = "20s", idle_timeout = "30s", complete_when = is_final, commit_when = is_final, commit_hold = 8)]
async fn complete(prompt: &str) -> Result<String, Error> {
    Ok(prompt.to_owned())
}

fn is_final(chunk: &String) -> bool {
    chunk.is_empty()
}

fn main() {}
