#[derive(Debug, resil::Transient)]
enum Error {
    Limited {
        #[transient]
        wait: std::time::Duration,
    },
}

fn main() {}
