#[derive(Debug, resil::Transient)]
enum Error {
    #[transient(retry_after = wait)]
    Limited { retry_in: std::time::Duration },
}

fn main() {}
