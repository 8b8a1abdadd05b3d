#[derive(Debug, resil::Transient)]
#[transient]
enum Error {
    Busy,
}

fn main() {}
