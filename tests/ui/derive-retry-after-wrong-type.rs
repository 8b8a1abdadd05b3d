#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(retry_after = seconds)]
    Limited { seconds: u64 },
}

fn main() {}
