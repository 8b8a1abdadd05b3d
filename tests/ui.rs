//! Compile errors that teach: one case per mistake in tests/ui, each with its expected
//! .stderr. Regenerate after a deliberate change with `TRYBUILD=overwrite cargo test --test ui`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
