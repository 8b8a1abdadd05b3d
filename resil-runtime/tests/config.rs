//! Configuration at run time: precedence, validation as a whole, switching a policy off,
//! reloads under load and a watched file. Its own test binary: policies and listeners are
//! process-wide.
#![cfg(feature = "config")]

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TestError;
use resil_runtime::config::{self, Overrides};
use resil_runtime::events::{self, Event, Listener};
use resil_runtime::{Jitter, Policy};

const SECOND: Duration = Duration::from_secs(1);

/// Configuration is process-wide: a test's `apply` resets the policies another test tuned,
/// so the tests take turns.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Default)]
struct Refusals(Mutex<Vec<String>>);

impl Listener for Refusals {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::ConfigRefused { message, .. } = event {
            self.0.lock().unwrap().push((*message).to_owned());
        }
    }
}

fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_attribute_then_the_file_then_the_environment() {
    let _turn = TURN.blocking_lock();
    let policy = Policy::builder()
        .name("cfg::charge")
        .timeout(20 * SECOND)
        .retry(2)
        .build()
        .unwrap();
    let file = Overrides::parse(
        "[\"cfg::charge\"]\ntimeout = \"5s\"\nretry = 1\njitter = \"none\"\n",
        "resil.toml",
    )
    .unwrap();
    let env = Overrides::from_vars(vars(&[
        ("RESIL_CFG__CHARGE__TIMEOUT", "3s"),
        ("PATH", "/usr/bin"),
    ]))
    .unwrap();
    config::apply(&file.then(env).expect("cfg::nobody")).unwrap();
    let tuning = policy.tuning();
    assert_eq!(tuning.timeout, Some(3 * SECOND), "the environment wins");
    assert_eq!(tuning.retry, 1, "the file, where the environment is silent");
    assert_eq!(tuning.backoff.jitter(), Jitter::None);

    config::apply(&Overrides::default()).unwrap();
    assert_eq!(
        policy.tuning().timeout,
        Some(20 * SECOND),
        "no longer mentioned: back to the defaults"
    );
}

#[test]
fn profiles_built_in_and_defined_by_the_configuration() {
    let _turn = TURN.blocking_lock();
    let quote = Policy::builder()
        .name("cfg::quote")
        .timeout(SECOND)
        .build()
        .unwrap();
    let answer = Policy::builder().name("cfg::answer").build().unwrap();
    let text = "\
[\"cfg::quote\"]
retry = 1
profile = \"partner_api\"

[\"cfg::answer\"]
profile = \"llm\"

[profiles.partner_api]
timeout = \"2s\"
retry = 3
";
    config::apply(&Overrides::parse(text, "resil.toml").unwrap()).unwrap();
    let tuning = quote.tuning();
    assert_eq!(
        tuning.timeout,
        Some(2 * SECOND),
        "the profile over the defaults"
    );
    assert_eq!(tuning.retry, 1, "a key beside the profile over the profile");
    assert_eq!(
        answer.tuning().timeout,
        Some(60 * SECOND),
        "a built-in profile"
    );

    let text = "[\"cfg::quote\"]\nprofile = \"partner\"\n\n[profiles.partner_api]\nretry = 3\n";
    let refused = config::apply(&Overrides::parse(text, "resil.toml").unwrap()).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("unknown profile \"partner\" (did you mean \"partner_api\"?)"),
        "{refused}"
    );
    config::apply(&Overrides::default()).unwrap();
}

#[test]
fn every_problem_at_once_and_nothing_applied() {
    let _turn = TURN.blocking_lock();
    let refusals = Arc::new(Refusals::default());
    events::add_global_listener(refusals.clone());
    let policy = Policy::builder()
        .name("cfg::search")
        .timeout(2 * SECOND)
        .build()
        .unwrap();
    let text = "\
[\"cfg::search\"]
timout = \"1s\"
retry = -1
deadline = \"1s\"

[\"cfg::serch\"]
timeout = \"1s\"

[\"cfg::other\"]
backoff = \"8s..1s\"
";
    let refused = Overrides::parse(text, "resil.toml").unwrap_err();
    let lines: Vec<String> = refused.problems.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].starts_with(
            "resil.toml:2: [cfg::search] timout: unknown key (did you mean `timeout`?)"
        ),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("resil.toml:3: [cfg::search] retry: takes a whole number"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("resil.toml:10: [cfg::other] backoff:"),
        "{}",
        lines[2]
    );

    let text = "[\"cfg::search\"]\ndeadline = \"1s\"\n\n[\"cfg::serch\"]\ntimeout = \"1s\"\n";
    let refused = config::apply(&Overrides::parse(text, "resil.toml").unwrap()).unwrap_err();
    let lines: Vec<String> = refused.problems.iter().map(ToString::to_string).collect();
    assert!(
        lines
            .iter()
            .any(|line| line.starts_with("resil.toml:5: [cfg::serch]")
                && line.contains("did you mean `cfg::search`?")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|line| line.starts_with(
            "resil.toml:2: [cfg::search] deadline: timeout 2s is longer than deadline 1s"
        )),
        "the attribute's timeout against the file's deadline: {lines:#?}"
    );
    assert_eq!(policy.tuning().deadline, None, "nothing applied");
    assert!(refusals
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|message| message.contains("cfg::serch")));
}

/// One precedence: configuration overrides a tuning set by hand key by key, and returns to
/// it, not to the attribute's values.
#[test]
fn a_tuning_set_by_hand_is_what_configuration_overrides_and_returns_to() {
    let _turn = TURN.blocking_lock();
    let policy = Policy::builder()
        .name("cfg::by_hand")
        .timeout(10 * SECOND)
        .retry(2)
        .build()
        .unwrap();
    let mut tuning = policy.tuning();
    tuning.retry = 0;
    policy.set_tuning(tuning).unwrap();
    config::apply(&Overrides::default()).unwrap();
    assert_eq!(policy.retries(), 0, "a configuration without it keeps it");
    let file = Overrides::parse("[\"cfg::by_hand\"]\ntimeout = \"1s\"\n", "resil.toml").unwrap();
    config::apply(&file).unwrap();
    assert_eq!(policy.tuning().timeout, Some(SECOND), "the file's key wins");
    assert_eq!(policy.retries(), 0, "the hand-set key stays under it");
    config::apply(&Overrides::default()).unwrap();
    assert_eq!(policy.tuning().timeout, Some(10 * SECOND));
    assert_eq!(policy.retries(), 0);
}

#[test]
fn only_variables_of_the_form_are_configuration() {
    let overrides = Overrides::from_vars(vars(&[
        ("RESIL_SOAK_OPERATIONS", "100000"),
        ("RESIL_LOG", "debug"),
        ("RESIL_CFG__SEARCH__TIMEOUT", "1s"),
    ]))
    .expect("another program's RESIL_ variables are not configuration");
    assert_eq!(overrides.len(), 1);
}

#[tokio::test]
async fn a_policy_switched_off_calls_straight_through() {
    let _turn = TURN.lock().await;
    let policy = Policy::builder()
        .name("cfg::off")
        .retry(3)
        .breaker_named("cfg-off", 1, 30 * SECOND)
        .build()
        .unwrap();
    let text = "[\"cfg::off\"]\nenabled = false\n";
    config::apply(&Overrides::parse(text, "test").unwrap()).unwrap();
    let calls = AtomicU32::new(0);
    for _ in 0..3 {
        let result: Result<(), TestError> = policy
            .run(|| async {
                calls.fetch_add(1, Ordering::Relaxed);
                Err(TestError::Busy)
            })
            .await;
        assert_eq!(result, Err(TestError::Busy));
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        3,
        "no retry, and no breaker to open"
    );
    config::apply(&Overrides::default()).unwrap();
}

/// Each round reloads the tuning, then starts calls whose first attempt waits for the next
/// reload: every call overlaps a reload, and must run under the tuning it started with.
#[tokio::test]
async fn reloads_under_load_lose_no_call_and_mix_no_tunings() {
    let _turn = TURN.lock().await;
    let policy = Arc::new(
        Policy::builder()
            .name("cfg::load")
            .retry(1)
            .backoff(Duration::from_micros(10), Duration::from_micros(10))
            .build()
            .unwrap(),
    );
    let (round, rounds) = tokio::sync::watch::channel(0u32);
    let waiting = Arc::new(AtomicU32::new(0));
    let retries = |round: u32| if round % 2 == 0 { 3 } else { 1 };
    let mut calls = Vec::new();
    for now in 0..50 {
        let text = format!("[\"cfg::load\"]\nretry = {}\n", retries(now));
        config::apply(&Overrides::parse(&text, "test").unwrap()).unwrap();
        round.send_replace(now);
        for _ in 0..8 {
            let (policy, rounds, waiting) =
                (Arc::clone(&policy), rounds.clone(), Arc::clone(&waiting));
            calls.push((
                now,
                tokio::spawn(async move {
                    let attempts = AtomicU32::new(0);
                    let _: Result<(), TestError> = policy
                        .run(|| async {
                            if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
                                waiting.fetch_add(1, Ordering::Relaxed);
                                // The next reload happens while this call is under way.
                                let mut rounds = rounds.clone();
                                rounds.wait_for(|round| *round > now).await.unwrap();
                            }
                            Err(TestError::Busy)
                        })
                        .await;
                    attempts.load(Ordering::Relaxed)
                }),
            ));
        }
        while waiting.load(Ordering::Relaxed) < 8 * (now + 1) {
            tokio::task::yield_now().await;
        }
    }
    round.send_replace(50);
    for (started, call) in calls {
        assert_eq!(
            call.await.unwrap(),
            retries(started) + 1,
            "a call started under `retry = {}` ran under it, whatever was reloaded meanwhile",
            retries(started)
        );
    }
    config::apply(&Overrides::default()).unwrap();
}

#[tokio::test]
async fn a_watched_file_applies_each_good_version_and_keeps_the_last_on_a_bad_one() {
    let _turn = TURN.lock().await;
    let policy = Policy::builder()
        .name("cfg::watched")
        .timeout(10 * SECOND)
        .build()
        .unwrap();
    let refusals = Arc::new(Refusals::default());
    events::add_global_listener(refusals.clone());
    let dir = std::env::temp_dir().join(format!("resil-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("resil.toml");
    std::fs::write(&path, "[\"cfg::watched\"]\ntimeout = \"1s\"\n").unwrap();
    let watcher = config::watch(&path, Duration::from_millis(10));
    let until = |timeout: Duration| {
        let policy = &policy;
        async move {
            for _ in 0..500 {
                if policy.tuning().timeout == Some(timeout) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    };
    assert!(until(SECOND).await, "the first version");
    std::fs::write(&path, "[\"cfg::watched\"]\ntimeout = \"2s\"\n").unwrap();
    assert!(
        until(2 * SECOND).await,
        "a change, applied without a restart"
    );
    // The watcher's refusal of each bad version is what the test waits for.
    let refused = |what: &'static str| {
        let refusals = &refusals;
        async move {
            for _ in 0..500 {
                if refusals.0.lock().unwrap().iter().any(|m| m.contains(what)) {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    };
    std::fs::write(&path, "[\"cfg::watched\"]\ntimeout = \"two seconds\"\n").unwrap();
    assert!(refused("two seconds").await, "the bad version is refused");
    assert_eq!(
        policy.tuning().timeout,
        Some(2 * SECOND),
        "the last good one stays"
    );
    // `std::fs::write` truncates first: a watcher may catch the file empty.
    std::fs::write(&path, "").unwrap();
    assert!(refused("is empty").await, "an empty file is refused");
    assert_eq!(
        policy.tuning().timeout,
        Some(2 * SECOND),
        "an empty file resets nothing"
    );
    std::fs::write(&path, "[\"cfg::watched\"]\ntimeout = \"3s\"\n").unwrap();
    assert!(until(3 * SECOND).await, "and the watch goes on");
    watcher.abort();
    std::fs::remove_dir_all(&dir).unwrap();
    config::apply(&Overrides::default()).unwrap();
}
