//! What the README promises a newcomer: it fits on four screens, its two commands are the
//! ones that work (the demo exists, the test command is the one CI runs), its Rust blocks
//! paste as shown (no hidden `# ` lines, none left uncompiled: `src/lib.rs` compiles each as a
//! doctest), every feature is named, and the keys live in the generated reference only.

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Each fenced block's info string and lines.
fn blocks(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => blocks.push(block),
            (Some(info), None) => open = Some((info.to_owned(), Vec::new())),
            (None, Some(mut block)) => {
                block.1.push(line);
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a code block is not closed");
    blocks
}

#[test]
fn the_readme_fits_on_four_screens() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 200,
        "the README has {lines} lines: move detail into src/guide/"
    );
}

#[test]
fn the_readmes_commands_are_the_demo_and_the_ci_test_command() {
    let readme = read("README.md");
    let commands = blocks(&readme)
        .into_iter()
        .find(|(info, _)| info == "sh")
        .expect("a sh block with the two commands")
        .1;
    assert_eq!(
        commands,
        ["cargo run --example retry_storm", "cargo xtask test"]
    );
    assert!(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/retry_storm.rs")
        .exists());
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|line| line.trim() == "cargo xtask test"),
        ".ci/run does not run the README's test command as written"
    );
}

#[test]
fn the_readmes_rust_blocks_paste_as_shown() {
    let readme = read("README.md");
    let rust: Vec<_> = blocks(&readme)
        .into_iter()
        .filter(|(info, _)| info.starts_with("rust"))
        .collect();
    assert!(!rust.is_empty());
    for (info, lines) in rust {
        assert!(
            !info.contains("ignore"),
            "```{info}: every Rust block compiles"
        );
        for line in lines {
            assert!(
                !(line.starts_with("# ") || line == "#"),
                "a hidden line shows when pasted: {line:?}"
            );
        }
    }
}

#[test]
fn the_readme_names_every_feature() {
    let readme = read("README.md");
    let manifest = read("Cargo.toml");
    let features = manifest
        .split("\n[features]\n")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    let names: Vec<_> = features
        .lines()
        .filter_map(|line| line.split_once(" = ").map(|(name, _)| name.trim()))
        .filter(|name| !name.starts_with('#') && *name != "default")
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    for name in names {
        assert!(
            readme.contains(&format!("`{name}`")),
            "the README does not name feature `{name}`"
        );
    }
}

#[test]
fn the_readme_links_to_the_generated_key_reference_instead_of_copying_it() {
    let readme = read("README.md");
    assert!(
        !readme.contains("| `timeout = "),
        "the README copies the key table"
    );
    assert!(readme.contains("resil/guide/reference/"));
}
