//! The guide's references are generated from the tables in the code: the keys from
//! `resil_spec::keys` (the table the macro lists from), the metric series from
//! `resil::series` (the names the meter reports through). A copy that differs fails here;
//! `RESIL_BLESS=1 cargo test --test reference` writes it again.

use std::path::Path;

fn check(file: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/guide")
        .join(file);
    if std::env::var_os("RESIL_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    if written != generated {
        let line = written
            .lines()
            .zip(generated.lines())
            .position(|(written, generated)| written != generated)
            .unwrap_or(written.lines().count().min(generated.lines().count()));
        panic!(
            "src/guide/{file} differs from what the code says, from line {}: run \
             `RESIL_BLESS=1 cargo test --test reference` to write it again\n  written:   {:?}\n  generated: {:?}",
            line + 1,
            written.lines().nth(line),
            generated.lines().nth(line),
        );
    }
}

#[test]
fn the_guides_key_reference_is_the_key_table() {
    check("keys.md", &resil_spec::keys::markdown());
}

#[test]
fn the_guides_list_of_series_is_the_meters() {
    check("series.md", &resil::series::markdown());
}
