use resil::resilient;

#[derive(Debug, resil::Transient)]
enum Error {
    #[transient]
    Busy,
}

#[resilient(retry = 2)]
async fn fetch() -> Result<u32, Error> {
    Err(Error::Busy)
}

fn main() {}
