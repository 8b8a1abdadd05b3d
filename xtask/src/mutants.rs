//! `cargo xtask mutants [--seeds N] [NAME ...]`: the simulator's proof that it finds what
//! matters (issue 46). Each mutation plants one defect the simulator must catch in the
//! runtime's source; the simulator then runs N worlds (20 000 unless said) against the known
//! failures, and the mutation is caught when a failure not listed there appears. The source is
//! put back after each, whatever happened. Fails when a mutation is not caught, or no longer
//! applies (the code it changes moved: update the table below).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A defect planted in `resil-runtime/src/{file}`: `from`, written once there, becomes `to`.
struct Mutation {
    name: &'static str,
    file: &'static str,
    from: &'static str,
    to: &'static str,
}

const MUTATIONS: &[Mutation] = &[
    Mutation {
        name: "probe-not-given-back-on-cancel",
        file: "execution/attempt/mod.rs",
        from: "    if let Some(ticket) = admitted.take().filter(|ticket| ticket.probe) {
        if let Some(breaker) = progress.breaker() {
            breaker.record(ticket, Verdict::Neutral);
        }
    }",
        to: "    let _ = admitted.take();",
    },
    Mutation {
        name: "gate-grants-one-extra-slot",
        file: "gate/share.rs",
        from: "let credit = interval.saturating_mul((self.burst / share).max(1));",
        to: "let credit = interval.saturating_mul((self.burst / share).max(1) + 1);",
    },
    Mutation {
        name: "route-set-breaker-removed",
        file: "execution/admission.rs",
        from: "        operation::set_breaker(admission.breaker().map_or(0, super::address));
        self.admission = Some(admission);",
        to: "        self.admission = Some(admission);",
    },
    Mutation {
        name: "retry-after-charged-to-the-wrong-target",
        file: "execution/route/racers.rs",
        from: "        self.targets[tag].lost(lost, Instant::now());",
        to: "        let wait = Lost { moves_on: false, retry_after: lost.retry_after };
        self.targets[tag].lost(Lost { retry_after: None, ..lost }, Instant::now());
        self.targets[*self.current].lost(wait, Instant::now());",
    },
    Mutation {
        name: "frame-walk-crosses-operations",
        file: "operation/frame.rs",
        from: "            Some(child) if !child.nested => return None,
            // Most often the next frame published; skipped past only when polled elsewhere.
            Some(child) => self.frames.find(|frame| frame.is_parent_of(child))?,",
        to: "            Some(_) => self.frames.next()?,",
    },
    Mutation {
        name: "cancelled-attempt-told-nothing",
        file: "execution/attempt/mod.rs",
        from: "                this.execution.cancelled(attempt, this.limits.started);",
        to: "                let _ = attempt;",
    },
    Mutation {
        name: "throttle-counts-as-a-failure",
        file: "execution/attempt/outcome.rs",
        from: "if error.is_transient() && !error.is_throttle() =>",
        to: "if error.is_transient() =>",
    },
    Mutation {
        name: "hedge-draws-nothing-from-the-budget",
        file: "execution/retry.rs",
        from: "            if self.tries.called && !budget.try_withdraw() {
                return false;",
        to: "            if false && !budget.try_withdraw() {
                return false;",
    },
    Mutation {
        name: "route-sent-not-metered",
        file: "execution/route/mod.rs",
        from: "    progress.settings.meters.routed(name.as_str(), true);",
        to: "",
    },
    Mutation {
        name: "skipped-target-still-chosen",
        file: "execution/route/mod.rs",
        from: "                    None
                }
                Standing::Later => Some((tried, true)),",
        to: "                    Some((true, true))
                }
                Standing::Later => Some((tried, true)),",
    },
    Mutation {
        name: "retries-read-anew-mid-operation",
        file: "execution/retry.rs",
        from: "        let tuning = &*self.tuning;
        if tuning.retry == 0 {",
        to: "        let current = self.settings.tunings.current();
        let tuning = &*current;
        if tuning.retry == 0 {",
    },
    Mutation {
        name: "evicted-keys-freed-a-batch-later",
        file: "registry.rs",
        from: "        papaya::Guard::flush(&self.map.guard());",
        to: "",
    },
    Mutation {
        name: "least-urgent-class-served-first",
        file: "priority/turns.rs",
        from: "        aged.or_else(|| (0..3).find(eligible))",
        to: "        aged.or_else(|| (0..3).rev().find(eligible))",
    },
    Mutation {
        name: "a-waiter-joins-its-lane-first",
        file: "priority/lanes.rs",
        from: "        lane.waiters.push_back(waiter);",
        to: "        lane.waiters.push_front(waiter);",
    },
    Mutation {
        name: "a-rejoining-instance-not-resynced",
        file: "shared/memory.rs",
        from: "            self.hub.resync(Some(self.instance));",
        to: "",
    },
    Mutation {
        name: "the-store-asked-at-the-learnt-pace",
        file: "execution/slots.rs",
        from: "gate.map_or(0, |gate| gate.taken_by(cost) / cost.max(1))",
        to: "gate.map_or(0, RateGate::interval_now)",
    },
    Mutation {
        name: "a-late-start-counted-from-its-slot",
        file: "gate/learn/ceiling.rs",
        from: "let due = (self.start_of(slot).min(now)).max(now.saturating_sub(missed));",
        to: "let due = self.start_of(slot).min(now);",
    },
    Mutation {
        name: "a-look-again-sees-only-the-learning-gate",
        file: "execution/learn.rs",
        from: "false => (!granted).then(|| {",
        to: "false => false.then(|| {",
    },
    Mutation {
        name: "a-probing-gate-sends-the-shared-gate-local",
        file: "execution/slots.rs",
        from: "if (rate_link.is_none() || probing[0]) && (token_link.is_none() || probing[1]) {",
        to: "if probing.contains(&true) {",
    },
    Mutation {
        name: "a-permanent-error-served-by-the-fallback",
        file: "execution/mod.rs",
        from: "                progress.outcome(\"error\");
                return Decision::Done(Next::Done(Outcome::Completed(Err(error))));",
        to: "                progress.outcome(\"error\");
                return Decision::Done(Next::Done(Outcome::Failed(error)));",
    },
];

pub(crate) fn mutants(args: &[String]) -> ExitCode {
    let (seeds, names) = match args {
        [flag, seeds, names @ ..] if flag == "--seeds" => (seeds.as_str(), names),
        names => ("20000", names),
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let chosen: Vec<&Mutation> = (MUTATIONS.iter())
        .filter(|m| names.is_empty() || names.iter().any(|name| name == m.name))
        .collect();
    let mut missed = 0;
    for mutation in chosen {
        match run(&root, mutation, seeds) {
            Ok(Some(caught)) => println!("{:<40} caught: {caught}", mutation.name),
            Ok(None) => {
                println!("{:<40} NOT caught in {seeds} worlds", mutation.name);
                missed += 1;
            }
            Err(error) => {
                println!("{:<40} {error}", mutation.name);
                missed += 1;
            }
        }
    }
    match missed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// The first new failure the simulator found with `mutation` planted, if any.
fn run(root: &Path, mutation: &Mutation, seeds: &str) -> Result<Option<String>, String> {
    let path = root.join("resil-runtime/src").join(mutation.file);
    let source = fs::read_to_string(&path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    if source.matches(mutation.from).count() != 1 {
        return Err(format!(
            "no longer applies: its code moved in {} (update xtask/src/mutants.rs)",
            mutation.file
        ));
    }
    let planted = Planted {
        path,
        source: source.clone(),
    };
    fs::write(
        &planted.path,
        source.replacen(mutation.from, mutation.to, 1),
    )
    .map_err(|e| format!("cannot write {:?}: {e}", planted.path))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let known = root.join("resil-sim/known-failures.txt");
    let output = Command::new(cargo)
        .current_dir(root)
        .args(crate::SIM)
        .args(["--seeds", seeds, "--known"])
        .arg(&known)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    drop(planted);
    let text = String::from_utf8_lossy(&output.stdout);
    let caught = text.lines().find(|line| line.starts_with("NEW failure"));
    match (output.status.success(), caught) {
        (_, Some(line)) => Ok(Some(line.trim_start_matches("NEW failure: ").to_owned())),
        (true, None) => Ok(None),
        (false, None) => Err(format!(
            "the simulator did not run: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        )),
    }
}

/// A source file with a mutation planted: put back as it was when dropped.
struct Planted {
    path: PathBuf,
    source: String,
}

impl Drop for Planted {
    fn drop(&mut self) {
        if let Err(error) = fs::write(&self.path, &self.source) {
            eprintln!(
                "cargo xtask mutants: could not put back {:?}: {error}",
                self.path
            );
        }
    }
}
