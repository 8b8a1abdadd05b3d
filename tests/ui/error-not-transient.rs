use resil::resilient;

#[derive(Debug)]
enum Error {
    Busy,
}

impl From<resil::Rejected> for Error {
    fn from(_: resil::Rejected) -> Self {
        Error::Busy
    }
}

#[resilient(retry = 2)]
async fn fetch() -> Result<u32, Error> {
    Err(Error::Busy)
}

fn main() {}
