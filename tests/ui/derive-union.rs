#[derive(resil::Transient)]
union Error {
    code: u32,
}

fn main() {}
