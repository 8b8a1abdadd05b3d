use resil::resilient;
use resil::stream::Stream;

#[derive(Debug)]
struct Status;

impl From<resil::Rejected> for Status {
    fn from(_: resil::Rejected) -> Self {
        Status
    }
}

fn is_retryable(_: &Status) -> bool {
    true
}

#[resilient(first_item_timeout = "20s", retry = 2, transient = is_retryable)]
async fn stream_chat(prompt: &str) -> Result<impl Stream<Item = Result<String, Status>>, Status> {
    Ok(futures::stream::iter([Ok(prompt.to_owned())]))
}

fn main() {}
