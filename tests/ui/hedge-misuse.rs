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

struct Client;

impl Client {
    #[resilient(timeout = "5s", retry = 2, hedge = "4 after 800ms")]
    async fn too_many(&self) -> Result<(), LlmError> {
        Ok(())
    }

    #[resilient(timeout = "500ms", retry = 2, hedge = "1 after 800ms")]
    async fn after_the_timeout(&self) -> Result<(), LlmError> {
        Ok(())
    }

    #[resilient(timeout = "5s", hedge = "1 after 800ms")]
    async fn without_retries(&self) -> Result<(), LlmError> {
        Ok(())
    }

    #[resilient(timeout = "5s", retry = 2, hedge = "1 after 800ms")]
    async fn needs_mut(&mut self, buffer: &mut Vec<u8>) -> Result<(), LlmError> {
        buffer.push(1);
        Ok(())
    }

    #[resilient(timeout = "5s", retry = 2, hedge = "one after 800ms")]
    async fn malformed(&self) -> Result<(), LlmError> {
        Ok(())
    }
}

fn main() {}
