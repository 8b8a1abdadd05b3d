#![deny(deprecated)]

fn main() {
    let _ = resil::shared::DEFAULT_TIMEOUT;
}
