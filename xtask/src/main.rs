//! The project's own commands, run as `cargo xtask <command>` (an alias in
//! `.cargo/config.toml`).
//!
//! `cargo xtask test [args]` is the README's test command, and what `.ci/run` runs: it brings
//! what the tests need that cargo cannot (`redis-server`, which the shared-state tests start on
//! 127.0.0.1, and `redis-cli`, which joins their Redis Cluster), then runs `cargo test --workspace --all-features [args]`. On a fresh
//! machine where it can install with the system's package manager (as root), it does; where it
//! cannot, it stops at once with the one line to run. `RESIL_SKIP_REDIS=1` skips the Redis
//! tests instead, saying so.
//!
//! `cargo xtask code-size` reports the machine code one annotated function costs, per
//! declaration (see `code_size.rs`).
//!
//! `cargo xtask sim [--seeds N] [--seed S] [--minutes M]` runs the simulator (`resil-sim`,
//! built in release): seeds 0..N (100 unless said), one seed with its plan and the steps of
//! any failure, or seeds until M minutes have passed; it fails when an invariant breaks and
//! prints the command that replays it.
//!
//! `cargo xtask mutants [--seeds N] [NAME ...]` plants each of the defects the simulator must
//! catch in the runtime, one at a time, and says which failure caught it (see `mutants.rs`).

mod code_size;
mod mutants;

use std::env;
use std::process::{Command, ExitCode, Stdio};

/// What `cargo xtask test` runs once the machine has what the tests need.
const TEST: [&str; 3] = ["test", "--workspace", "--all-features"];

/// How cargo runs the simulator, in release (a world runs in about a millisecond there); its
/// own arguments follow.
const SIM: [&str; 6] = [
    "run",
    "--quiet",
    "--release",
    "--package",
    "resil-sim",
    "--",
];

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.split_first() {
        Some((command, rest)) if command == "test" => test(rest),
        Some((command, [])) if command == "code-size" => code_size::code_size(),
        Some((command, rest)) if command == "sim" => sim(rest),
        Some((command, rest)) if command == "mutants" => mutants::mutants(rest),
        _ => {
            eprintln!("usage: cargo xtask test [cargo test's arguments] | cargo xtask code-size | cargo xtask sim [--seeds N] [--seed S] [--minutes M] | cargo xtask mutants [--seeds N] [NAME ...]");
            ExitCode::FAILURE
        }
    }
}

fn test(args: &[String]) -> ExitCode {
    if !skips_redis() {
        if let Err(line) = redis_server() {
            eprintln!("{line}");
            return ExitCode::FAILURE;
        }
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    match Command::new(cargo).args(TEST).args(args).status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("cargo xtask: cannot run cargo ({error})");
            ExitCode::FAILURE
        }
    }
}

/// The simulator, with the arguments given.
fn sim(args: &[String]) -> ExitCode {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    match Command::new(cargo).args(SIM).args(args).status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("cargo xtask: cannot run cargo ({error})");
            ExitCode::FAILURE
        }
    }
}

/// `redis-server` and `redis-cli` on the path: there already, or installed now, or the one
/// line to run.
fn redis_server() -> Result<(), String> {
    if redis_installed() {
        return Ok(());
    }
    let Some(manager) = MANAGERS
        .iter()
        .find(|manager| runs(manager.probe, &["--version"]))
    else {
        return Err("the shared-state tests need redis-server and redis-cli (https://redis.io/downloads/): install them, then run `cargo xtask test` again (or `RESIL_SKIP_REDIS=1 cargo xtask test` to skip them)".to_owned());
    };
    let line = |sudo: &str| {
        let steps = manager
            .steps()
            .map(|step| format!("{sudo}{}", step.join(" ")));
        steps.collect::<Vec<_>>().join(" && ")
    };
    if !is_root() {
        let line = line(if manager.as_root { "sudo " } else { "" });
        return Err(format!(
            "the shared-state tests need redis-server and redis-cli: run `{line}`, then `cargo xtask test` again (or `RESIL_SKIP_REDIS=1 cargo xtask test` to skip them)"
        ));
    }
    eprintln!("cargo xtask: installing redis-server: {}", line(""));
    for step in manager.steps() {
        let installed = Command::new(step[0])
            .args(&step[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !installed {
            return Err(format!(
                "cargo xtask: `{}` failed: install redis-server by hand, then run `cargo xtask test` again",
                step.join(" ")
            ));
        }
    }
    if redis_installed() {
        Ok(())
    } else {
        Err("cargo xtask: redis-server was installed but it or redis-cli is not on the path: add them, then run `cargo xtask test` again".to_owned())
    }
}

/// Whether `redis-server` and `redis-cli` both run.
fn redis_installed() -> bool {
    runs("redis-server", &["--version"]) && runs("redis-cli", &["--version"])
}

/// A system package manager that has redis-server (and redis-cli), and how to install them
/// with it.
struct Manager {
    /// The command whose `--version` says the manager is there.
    probe: &'static str,
    /// Run first, when the manager's index must be fresh (apt).
    refresh: Option<&'static [&'static str]>,
    install: &'static [&'static str],
    /// Installs system-wide, as root (all but Homebrew).
    as_root: bool,
}

impl Manager {
    fn steps(&self) -> impl Iterator<Item = &'static [&'static str]> {
        self.refresh.into_iter().chain([self.install])
    }
}

const MANAGERS: &[Manager] = &[
    Manager {
        probe: "apt-get",
        refresh: Some(&["apt-get", "update", "-qq"]),
        install: &[
            "apt-get",
            "install",
            "-y",
            "-qq",
            "redis-server",
            "redis-tools",
        ],
        as_root: true,
    },
    Manager {
        probe: "dnf",
        refresh: None,
        install: &["dnf", "install", "-y", "redis"],
        as_root: true,
    },
    Manager {
        probe: "apk",
        refresh: None,
        install: &["apk", "add", "redis"],
        as_root: true,
    },
    Manager {
        probe: "pacman",
        refresh: None,
        install: &["pacman", "-Sy", "--noconfirm", "redis"],
        as_root: true,
    },
    Manager {
        probe: "brew",
        refresh: None,
        install: &["brew", "install", "redis"],
        as_root: false,
    },
];

/// `RESIL_SKIP_REDIS` set to anything but empty or `0`, as the Redis tests read it.
fn skips_redis() -> bool {
    env::var_os("RESIL_SKIP_REDIS").is_some_and(|value| !value.is_empty() && value != "0")
}

/// Whether `program` runs and succeeds with `args`, quietly.
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether this process may install system packages without asking anyone: it runs as root
/// (a CI machine, a container). Elsewhere the line to run is given instead.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}
