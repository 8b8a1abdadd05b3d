#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(retry)]
    Busy,
}

fn main() {}
