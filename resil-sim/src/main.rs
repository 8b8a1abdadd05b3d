//! `cargo xtask sim [--seeds N] [--seed S] [--minutes M]`: seeded worlds of instances,
//! providers and callers run through resil's policies on tokio's paused clock, with named
//! invariants checked at every step and at quiescence (issue 46).
//!
//! A world is drawn from its seed alone (`plan.rs`: providers, declarations, callers, the
//! store's faults, tunings set at run time, many keys at the end) and run on a current-thread
//! runtime whose clock is paused (`world.rs`): no wall clock, no thread, every draw from the
//! seed, so a seed replays exactly (worlds run side by side on the machine's cores, each on
//! one thread). A failure prints the seed, the invariant with the guide's sentence, the steps
//! that led to it and the command that replays it, then the callers it still fails with
//! (`shrink.rs`).
//!
//! Beyond the three documented flags: `--only 3,17` keeps those callers (a shrunk schedule),
//! `--calm` drops the store's faults, `--alone` drops coalescing (no caller awaits another's
//! call), `--trace` prints every step of `--seed S` as it happens, `--all` one line per failure,
//! `--known FILE` passes a run whose failures are all listed there (`invariant seed seed …` a
//! line; CI's ratchet: a new failure fails, a listed seed that passes is said, to be dropped).
//!
//! What it finds, run against the code before the fixes it was built for and against planted
//! defects (`cargo xtask mutants`): `PROOF.md`.

mod build;
mod changes;
mod check;
// Live bytes per thread (a world is one thread's), shared with the runtime's allocation tests.
#[path = "../../resil-runtime/tests/common/counting.rs"]
mod counting;
mod ear;
mod ended;
mod fallback;
mod keys;
mod metered;
mod plan;
mod provider;
mod quiescence;
mod shrink;
mod streams;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use check::{Checker, Inv, INVARIANTS};
use plan::Plan;

const USAGE: &str =
    "usage: cargo xtask sim [--seeds N] [--seed S] [--minutes M] [--only CALLERS] [--calm] [--alone] [--trace] [--all] [--known FILE]";

/// What to run: seeds 0..N (default 100), one seed, or seeds until M minutes have passed.
#[derive(Debug, Default)]
struct Args {
    seeds: Option<u64>,
    seed: Option<u64>,
    minutes: Option<f64>,
    /// The callers to keep (a shrunk schedule's replay), by their ids.
    only: Option<Vec<usize>>,
    /// One line for every failure, not only each invariant's first.
    all: bool,
    /// Without the store's faults (a shrunk schedule's replay).
    calm: bool,
    /// Without coalescing: no caller awaits another's call.
    alone: bool,
    /// The failures known and tolerated: a run fails only on others.
    known: Option<String>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args::default();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--trace" {
            check::TRACE.store(true, std::sync::atomic::Ordering::Relaxed);
            continue;
        }
        if flag == "--alone" {
            parsed.alone = true;
            continue;
        }
        if flag == "--calm" {
            parsed.calm = true;
            continue;
        }
        if flag == "--all" {
            parsed.all = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |_| format!("{flag}: not a number: {value}");
        match flag.as_str() {
            "--seeds" => parsed.seeds = Some(value.parse().map_err(bad)?),
            "--seed" => parsed.seed = Some(value.parse().map_err(bad)?),
            "--known" => parsed.known = Some(value.clone()),
            "--minutes" => {
                parsed.minutes = Some(
                    value
                        .parse()
                        .map_err(|_| format!("{flag}: not a number: {value}"))?,
                )
            }
            "--only" => {
                let ids: Result<Vec<usize>, _> = value.split(',').map(str::parse).collect();
                parsed.only =
                    Some(ids.map_err(|_| format!("{flag}: not a list of numbers: {value}"))?);
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    Ok(parsed)
}

/// The plan of a seed whose declarations all build (a refused draw is drawn again), and
/// how many draws were refused.
fn plan_of(seed: u64) -> (Plan, u64) {
    for redraw in 0.. {
        let plan = Plan::draw(seed, redraw);
        if build::builds(&plan).is_ok() {
            return (plan, redraw);
        }
    }
    unreachable!("some draw builds")
}

/// The first failure of each seed that failed, by invariant.
type Found = BTreeMap<Inv, Vec<u64>>;

/// Seeds run at once, spread over the machine's cores (a world is one thread's).
const BATCH: usize = 64;

/// Runs `seeds`' worlds on every core, each world on one thread; results in seed order.
fn run_batch(
    seeds: &[u64],
    only: Option<&[usize]>,
    calm: bool,
    alone: bool,
) -> Vec<(u64, Plan, u64, world::Outcome)> {
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = seeds.len().div_ceil(jobs).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = seeds
            .chunks(chunk)
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|&seed| {
                            let (mut plan, redraws) = plan_of(seed);
                            if let Some(only) = only {
                                plan.callers.retain(|caller| only.contains(&caller.id));
                            }
                            if calm {
                                plan.store.clear();
                            }
                            if alone {
                                for caller in &mut plan.callers {
                                    caller.joins = None;
                                }
                            }
                            let outcome = world::run(&plan);
                            (seed, plan, redraws, outcome)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a world's thread"))
            .collect()
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("{error}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    // The panics a world plants are caught by their callers: only the others are printed.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !ended::planted(info) {
            report(info);
        }
    }));
    let started = Instant::now();
    let budget = args
        .minutes
        .map(|minutes| Duration::from_secs_f64(minutes * 60.0));
    let seeds: Box<dyn Iterator<Item = u64>> = match (args.seed, args.seeds, budget) {
        (Some(seed), ..) => Box::new(std::iter::once(seed)),
        (None, Some(count), _) => Box::new(0..count),
        (None, None, Some(_)) => Box::new(0..),
        (None, None, None) => Box::new(0..100),
    };
    let mut seeds = seeds.peekable();
    let mut ran = BTreeSet::new();
    let mut exercised = [0u64; INVARIANTS.len()];
    let mut found = Found::new();
    let (mut worlds, mut attempts, mut callers, mut refused) = (0u64, 0u64, 0u64, 0u64);
    while seeds.peek().is_some() {
        if budget.is_some_and(|budget| started.elapsed() >= budget) {
            break;
        }
        let batch: Vec<u64> = seeds.by_ref().take(BATCH).collect();
        for (seed, plan, redraws, outcome) in
            run_batch(&batch, args.only.as_deref(), args.calm, args.alone)
        {
            refused += redraws;
            ran.insert(seed);
            if args.seed.is_some() {
                println!(
                    "seed {seed}: {} instances (store handles {:?}), shared {:?}, store faults {}",
                    plan.instances(),
                    plan.handle_of,
                    plan.shared,
                    plan.store.len()
                );
                println!("  outer: {:?}\n  inner: {:?}", plan.outer, plan.inner);
                for (index, target) in plan.targets.iter().enumerate() {
                    println!("  {}: {target:?}", plan::TARGETS[index]);
                }
            }
            worlds += 1;
            attempts += outcome.attempts;
            callers += plan.callers.len() as u64;
            for (total, count) in exercised.iter_mut().zip(outcome.exercised) {
                *total += count;
            }
            let first = found.is_empty();
            for failure in &outcome.failures {
                let seeds = found.entry(failure.inv).or_default();
                seeds.push(seed);
                let name = INVARIANTS[failure.inv as usize].name;
                if args.all {
                    println!("seed {seed}: {name}: {}", failure.message);
                }
                if seeds.len() > 1 && args.seed.is_none() {
                    continue;
                }
                println!(
                    "\nseed {seed}: {name} broken at {:.3}s: {}\n  guide: {}",
                    failure.at.as_secs_f64(),
                    failure.message,
                    INVARIANTS[failure.inv as usize].guide
                );
                print!("{}", Checker::render(failure));
                println!("  replay: cargo xtask sim --seed {seed}");
                if first || args.seed.is_some() {
                    let shrunk = shrink::shrink(&plan, failure.inv);
                    let ids: Vec<String> =
                        shrunk.callers.iter().map(|c| c.id.to_string()).collect();
                    let calm = shrunk.store.is_empty() && !plan.store.is_empty();
                    println!(
                        "  shrunk to {} of {} callers{}: cargo xtask sim --seed {seed} --only {}{}",
                        shrunk.callers.len(),
                        plan.callers.len(),
                        if calm {
                            ", without the store's faults"
                        } else {
                            ""
                        },
                        ids.join(","),
                        [(calm || args.calm, " --calm"), (args.alone, " --alone")]
                            .iter()
                            .filter(|(on, _)| *on)
                            .map(|(_, flag)| *flag)
                            .collect::<String>()
                    );
                }
            }
        }
    }
    println!(
        "\n{worlds} worlds ({callers} callers, {attempts} attempts; {refused} declarations refused by build and drawn again) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    println!("{:<45} {:>10}  failing seeds", "invariant", "checks");
    for (index, invariant) in INVARIANTS.iter().enumerate() {
        let seeds = found
            .iter()
            .find(|(inv, _)| **inv as usize == index)
            .map(|(_, seeds)| {
                seeds
                    .iter()
                    .take(12)
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let dead = if exercised[index] == 0 {
            "  (never exercised)"
        } else {
            ""
        };
        println!(
            "{:<45} {:>10}  {seeds}{dead}",
            invariant.name, exercised[index]
        );
    }
    let Some(path) = &args.known else {
        return exit(found.is_empty());
    };
    let known = match std::fs::read_to_string(path) {
        Ok(text) => match known(&text) {
            Ok(known) => known,
            Err(error) => {
                eprintln!("--known {path}: {error}");
                return ExitCode::FAILURE;
            }
        },
        Err(error) => {
            eprintln!("--known {path}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let failed: BTreeSet<(String, u64)> = (found.iter())
        .flat_map(|(inv, seeds)| {
            let name = INVARIANTS[*inv as usize].name;
            seeds.iter().map(move |&seed| (name.to_owned(), seed))
        })
        .collect();
    let new: Vec<_> = failed.difference(&known).collect();
    let fixed: Vec<_> = (known.iter())
        .filter(|failure| ran.contains(&failure.1) && !failed.contains(*failure))
        .collect();
    for (name, seed) in &fixed {
        println!("known to fail, passes now (drop it from {path}): {name} {seed}");
    }
    for (name, seed) in &new {
        println!("NEW failure: {name}, seed {seed}: cargo xtask sim --seed {seed}");
    }
    println!(
        "{} failures known ({path}), {} new",
        failed.len() - new.len(),
        new.len()
    );
    exit(new.is_empty())
}

fn exit(passed: bool) -> ExitCode {
    match passed {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

/// The failures a `--known` file lists: `invariant seed seed …` a line, `#` comments.
fn known(text: &str) -> Result<BTreeSet<(String, u64)>, String> {
    let mut known = BTreeSet::new();
    for line in text
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
    {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        if !INVARIANTS.iter().any(|invariant| invariant.name == name) {
            return Err(format!("no invariant named {name}"));
        }
        for seed in words {
            let seed = seed
                .parse()
                .map_err(|_| format!("{name}: not a seed: {seed}"))?;
            known.insert((name.to_owned(), seed));
        }
    }
    Ok(known)
}
