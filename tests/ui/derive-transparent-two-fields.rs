#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(transparent)]
    Io(std::io::Error, String),
}

fn main() {}
