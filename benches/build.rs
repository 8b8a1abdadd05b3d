//! Writes the functions the `code_size` binary holds: `RESIL_CODE_SIZE_COPIES` copies (1
//! unless set) of one function declared `#[resilient(RESIL_CODE_SIZE_ATTRIBUTE)]`
//! (`timeout = "20s"` unless set). `cargo xtask code-size` builds it with one copy and with
//! three: half the difference is the machine code one more such function costs.

use std::env;
use std::fmt::Write;
use std::path::Path;

fn main() {
    println!("cargo::rerun-if-env-changed=RESIL_CODE_SIZE_ATTRIBUTE");
    println!("cargo::rerun-if-env-changed=RESIL_CODE_SIZE_COPIES");
    let attribute =
        env::var("RESIL_CODE_SIZE_ATTRIBUTE").unwrap_or_else(|_| r#"timeout = "20s""#.to_owned());
    let copies: u32 = env::var("RESIL_CODE_SIZE_COPIES")
        .ok()
        .and_then(|copies| copies.parse().ok())
        .unwrap_or(1);
    let mut code = String::new();
    let mut calls = String::new();
    for copy in 0..copies {
        // Each copy answers its own number, so that no two are the same code to merge.
        let _ = writeln!(
            code,
            "#[resil::resilient({attribute})]\n\
             async fn copy_{copy}(model: &str) -> Result<u64, Failure> {{\n\
                 std::hint::black_box(model);\n\
                 Ok(std::hint::black_box({copy}))\n\
             }}"
        );
        let _ = writeln!(
            calls,
            "std::hint::black_box(copy_{copy}(std::hint::black_box(\"model-a\")).await.ok());"
        );
    }
    let _ = writeln!(code, "async fn call_every_copy() {{\n{calls}}}");
    let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("code_size_copies.rs"), code).expect("OUT_DIR is writable");
}
