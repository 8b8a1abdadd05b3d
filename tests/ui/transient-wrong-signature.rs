use resil::resilient;

#[derive(Debug)]
struct Status;

impl From<resil::Rejected> for Status {
    fn from(_: resil::Rejected) -> Self {
        Status
    }
}

fn takes_a_string(message: &String) -> bool {
    message.is_empty()
}

fn returns_a_code(_: &Status) -> u16 {
    503
}

#[resilient(retry = 2, transient = takes_a_string)]
async fn call() -> Result<u32, Status> {
    Ok(1)
}

#[resilient(retry = 2, transient = returns_a_code)]
async fn call_coded() -> Result<u32, Status> {
    Ok(1)
}

fn main() {}
