use resil::resilient;

// An error type of another crate: neither `Transient` nor `From<resil::Rejected>` can be
// written for it here. The error names `transient = ...` and the `anyhow` feature, never a
// derive on a type the user does not own.
#[resilient(retry = 2)]
async fn parse(text: &str) -> Result<u32, std::num::ParseIntError> {
    text.parse()
}

fn main() {}
