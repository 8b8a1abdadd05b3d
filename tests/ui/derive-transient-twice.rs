#[derive(Debug, resil::Transient)]
enum Error {
    #[transient]
    #[transient(retry_after = wait)]
    Limited { wait: std::time::Duration },
}

fn main() {}
