//! `cargo xtask code-size`: the machine code one annotated function costs, per declaration.
//! For each case, the `code_size` binary of resil-benches is built in release with one copy
//! of a function declared so and with three (its `build.rs` writes them); half the difference
//! of the binary's executable sections is what one more such function adds (one copy more
//! moves by ±5 % with the compiler's inlining choices; two average them): its own state machine,
//! the runtime's generic code made for its types, its policy's initialisation and drop glue,
//! not the runtime code every function shares.

use std::env;
use std::process::{Command, ExitCode};

/// The declarations measured: the instruction counter's cases (benches/instructions).
const CASES: &[(&str, &str)] = &[
    ("timeout", r#"timeout = "20s""#),
    ("timeout+retry", r#"timeout = "20s", retry = 2"#),
    (
        "all-four",
        r#"timeout = "20s", retry = 2, breaker = "size", bulkhead = 8"#,
    ),
    (
        "all-four-keyed",
        r#"timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8"#,
    ),
    (
        "all-four-routed",
        r#"timeout = "20s", retry = 2, breaker = "per_model", bulkhead = 8, route = model in ["model-b"]"#,
    ),
    (
        "all-four-hedged",
        r#"timeout = "20s", retry = 2, breaker = "size", bulkhead = 8, hedge = "1 after 800ms""#,
    ),
    (
        "all-four+rate",
        r#"timeout = "20s", retry = 2, breaker = "size", bulkhead = 8, rate = "10/s""#,
    ),
];

pub(crate) fn code_size() -> ExitCode {
    println!(
        "machine code per annotated function (release build; bytes one more such function adds)"
    );
    for (name, attribute) in CASES {
        let sizes = [1, 3].map(|copies| built(attribute, copies));
        match sizes {
            [Ok(one), Ok(three)] => {
                let each = three.saturating_sub(one) / 2;
                println!("  {name:<18} {each:>7}   #[resilient({attribute})]");
            }
            [Err(error), _] | [_, Err(error)] => {
                eprintln!("cargo xtask code-size: {name}: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The bytes of executable code in the `code_size` binary holding `copies` functions
/// declared `#[resilient(attribute)]`.
fn built(attribute: &str, copies: u32) -> Result<u64, String> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "-q",
            "-p",
            "resil-benches",
            "--bin",
            "code_size",
        ])
        .env("RESIL_CODE_SIZE_ATTRIBUTE", attribute)
        .env("RESIL_CODE_SIZE_COPIES", copies.to_string())
        .status()
        .map_err(|error| format!("cannot run cargo ({error})"))?;
    if !status.success() {
        return Err("the build failed (its errors are above)".to_owned());
    }
    let target = env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".to_owned());
    let path = format!("{target}/release/code_size");
    let binary = std::fs::read(&path).map_err(|error| format!("cannot read {path}: {error}"))?;
    executable_bytes(&binary).ok_or_else(|| {
        format!("{path} is not a 64-bit little-endian ELF file: code-size reads only those")
    })
}

/// The sizes of an ELF64 (little-endian) file's executable sections, summed.
fn executable_bytes(elf: &[u8]) -> Option<u64> {
    const EXECUTABLE: u64 = 0x4;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let word = |at: usize, width: usize| -> Option<u64> {
        let mut bytes = [0u8; 8];
        bytes[..width].copy_from_slice(elf.get(at..at + width)?);
        Some(u64::from_le_bytes(bytes))
    };
    let table = usize::try_from(word(0x28, 8)?).ok()?;
    let (entry, count) = (usize::try_from(word(0x3A, 2)?).ok()?, word(0x3C, 2)?);
    (0..usize::try_from(count).ok()?).try_fold(0u64, |sum, index| {
        let header = table.checked_add(index.checked_mul(entry)?)?;
        let (flags, size) = (word(header + 0x08, 8)?, word(header + 0x20, 8)?);
        Some(sum + if flags & EXECUTABLE != 0 { size } else { 0 })
    })
}

#[cfg(test)]
mod tests {
    use super::executable_bytes;

    #[test]
    fn what_is_not_an_elf64_file_is_refused() {
        assert_eq!(executable_bytes(b"MZ\x90\x00"), None);
        assert_eq!(executable_bytes(b"\x7fELF\x02\x01"), None, "cut short");
    }

    #[test]
    fn the_running_binary_has_code() {
        if cfg!(all(
            target_os = "linux",
            target_pointer_width = "64",
            target_endian = "little"
        )) {
            let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
            assert!(executable_bytes(&me).unwrap() > 1000);
        }
    }
}
