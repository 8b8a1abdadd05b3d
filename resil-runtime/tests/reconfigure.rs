//! Changing a policy's tuning while it runs, as often as a service likes: every configuration
//! applies whole or not at all, a tuning set by hand stays under the file's overrides, a
//! watched file waits for the policy it names, and other programs' variables are not
//! configuration. Its own test binary: policies and listeners are process-wide.
#![cfg(feature = "config")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use resil_runtime::config::{self, Overrides};
use resil_runtime::events::{self, Event, Listener};
use resil_runtime::{ConfigError, Policy};

const SECOND: Duration = Duration::from_secs(1);

/// Configuration is process-wide: a test's `apply` resets the policies another test tuned,
/// so the tests take turns.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the listeners heard of configuration.
#[derive(Debug, Default)]
struct Heard(Mutex<Vec<String>>);

impl Listener for Heard {
    fn on_event(&self, event: &Event<'_>) {
        let heard = match event {
            Event::ConfigRefused { message, .. } => format!("refused: {message}"),
            Event::Reconfigured { site } => format!("reconfigured: {site}"),
            _ => return,
        };
        self.0.lock().unwrap().push(heard);
    }
}

fn heard() -> Arc<Heard> {
    let heard = Arc::new(Heard::default());
    events::add_global_listener(heard.clone());
    heard
}

fn parse(text: &str) -> Overrides {
    Overrides::parse(text, "resil.toml").unwrap()
}

fn vars(pairs: &[(&str, &str)]) -> Overrides {
    let vars = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    Overrides::from_vars(vars).unwrap()
}

/// A service whose values change often (a reloaded file, an adaptive controller) changes
/// them as often as it likes: 20 000 distinct tunings, each applied, through configuration
/// and by hand, while an operation started under the first keeps it to its end.
#[tokio::test(start_paused = true)]
async fn twenty_thousand_distinct_tunings_each_apply_and_an_operation_keeps_its_own() {
    let _turn = TURN.lock().await;
    let policy = Policy::builder()
        .name("reconf::often")
        .timeout(SECOND)
        .build()
        .unwrap();
    let mut started = policy.execute::<common::TestError>();
    for ms in 1..=10_000u64 {
        let text = format!("[\"reconf::often\"]\ntimeout = \"{ms}ms\"\n");
        assert_eq!(
            config::apply(&parse(&text)).unwrap(),
            1,
            "configuration {ms}"
        );
        assert_eq!(policy.tuning().timeout, Some(Duration::from_millis(ms)));
    }
    config::apply(&Overrides::default()).unwrap();
    for ms in 10_001..=20_000u64 {
        let mut tuning = policy.tuning();
        tuning.timeout = Some(Duration::from_millis(ms));
        policy
            .set_tuning(tuning)
            .expect("never refused for being one too many");
        assert_eq!(policy.tuning().timeout, Some(Duration::from_millis(ms)));
    }
    // Started under the 1 s timeout, before any change: a 2 s body still times out at 1 s.
    let outcome = started
        .attempt(async {
            tokio::time::sleep(2 * SECOND).await;
            Ok::<_, common::TestError>(())
        })
        .await;
    assert!(
        matches!(
            outcome,
            resil_runtime::Next::Done(resil_runtime::Outcome::Failed(common::TestError::Rejected(
                resil_runtime::Rejected::Timeout { after }
            ))) if after == SECOND
        ),
        "{outcome:?}"
    );
    let mut tuning = policy.tuning();
    tuning.timeout = Some(SECOND);
    policy.set_tuning(tuning).unwrap();
}

/// A configuration that changes two policies changes both, or neither.
#[test]
fn a_configuration_applies_to_every_policy_it_names_or_to_none() {
    let _turn = TURN.blocking_lock();
    let heard = heard();
    let first = Policy::builder().name("reconf::first").build().unwrap();
    let second = Policy::builder().name("reconf::second").build().unwrap();
    for round in 1..=300u32 {
        let text = format!(
            "[\"reconf::first\"]\nretry = {round}\n[\"reconf::second\"]\nretry = {round}\n"
        );
        assert_eq!(config::apply(&parse(&text)).unwrap(), 2, "round {round}");
        assert_eq!((first.retries(), second.retries()), (round, round));
    }
    let bad = "[\"reconf::first\"]\nretry = 1\n[\"reconf::second\"]\ntimeout = \"2s\"\ndeadline = \"1s\"\n";
    let refused = config::apply(&parse(bad)).unwrap_err();
    assert_eq!(refused.problems.len(), 1, "{refused}");
    assert_eq!(
        (first.retries(), second.retries()),
        (300, 300),
        "neither changed"
    );
    assert!(heard
        .0
        .lock()
        .unwrap()
        .iter()
        .any(|heard| heard.starts_with("refused:") && heard.contains("reconf::second")));
    config::apply(&Overrides::default()).unwrap();
}

/// The file's overrides are written over a tuning set by hand at once, not when the file
/// next changes; a tuning that breaks a rule under them is refused, and changes nothing.
#[test]
fn a_tuning_set_by_hand_stays_under_the_files_overrides() {
    let _turn = TURN.blocking_lock();
    let policy = Policy::builder()
        .name("reconf::by_hand")
        .timeout(10 * SECOND)
        .build()
        .unwrap();
    config::apply(&parse("[\"reconf::by_hand\"]\ntimeout = \"1s\"\n")).unwrap();
    let mut tuning = policy.tuning();
    tuning.timeout = Some(20 * SECOND);
    tuning.retry = 3;
    policy.set_tuning(tuning).unwrap();
    assert_eq!(
        policy.tuning().timeout,
        Some(SECOND),
        "the file's override stays"
    );
    assert_eq!(policy.retries(), 3, "the hand's own key applies");

    let mut tuning = policy.tuning();
    tuning.timeout = None;
    tuning.deadline = Some(SECOND / 2);
    let refused = policy.set_tuning(tuning).unwrap_err();
    assert!(
        matches!(refused, ConfigError::Overridden { .. }),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("with the configuration's overrides"),
        "{refused}"
    );
    assert_eq!(
        (
            policy.tuning().timeout,
            policy.tuning().deadline,
            policy.retries()
        ),
        (Some(SECOND), None, 3),
        "nothing changed"
    );
    config::apply(&Overrides::default()).unwrap();
    assert_eq!(
        policy.tuning().timeout,
        Some(20 * SECOND),
        "back to the hand's"
    );
}

#[test]
fn a_policy_switched_off_is_reported_changed_once() {
    let _turn = TURN.blocking_lock();
    let heard = heard();
    let _policy = Policy::builder()
        .name("reconf::off")
        .timeout(SECOND)
        .retry(2)
        .build()
        .unwrap();
    let off = parse("[\"reconf::off\"]\nenabled = false\n");
    assert_eq!(config::apply(&off).unwrap(), 1);
    assert_eq!(config::apply(&off).unwrap(), 0, "already off");
    let told = |heard: &Heard| {
        (heard.0.lock().unwrap().iter())
            .filter(|heard| *heard == "reconfigured: reconf::off")
            .count()
    };
    assert_eq!(told(&heard), 1);
    config::apply(&Overrides::default()).unwrap();
}

/// A version refused for naming a policy not built yet applies once that policy is built,
/// without the file changing.
#[tokio::test(start_paused = true)]
async fn a_watched_file_naming_a_policy_not_built_yet_applies_when_it_is() {
    let _turn = TURN.lock().await;
    let heard = heard();
    let dir = std::env::temp_dir().join(format!("resil-reconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("resil.toml");
    std::fs::write(&path, "[\"reconf::later\"]\ntimeout = \"1s\"\n").unwrap();
    let watcher = config::watch(&path, Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(
        heard
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|heard| heard.contains("reconf::later")),
        "refused while the policy does not exist"
    );
    let policy = Policy::builder()
        .name("reconf::later")
        .timeout(10 * SECOND)
        .build()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        policy.tuning().timeout,
        Some(SECOND),
        "applied once it exists"
    );
    watcher.abort();
    std::fs::remove_dir_all(&dir).unwrap();
    config::apply(&Overrides::default()).unwrap();
}

/// Only a variable that names a policy is configuration: another program's `RESIL_<X>__<Y>`
/// is ignored, with its problems; a problem of one that names a policy refuses the whole.
#[test]
fn other_programs_variables_are_not_configuration() {
    let _turn = TURN.blocking_lock();
    let policy = Policy::builder()
        .name("reconf::env")
        .timeout(10 * SECOND)
        .build()
        .unwrap();
    let file = parse("[\"reconf::env\"]\ntimeout = \"2s\"\n");
    let others = vars(&[
        ("RESIL_CACHE__DIR", "/var/cache"),
        ("RESIL_WORKER__TIMEOUT", "forever"),
        ("RESIL_WORKER__RETRY", "3"),
        ("RESIL_RECONF__ENV__RETRY", "1"),
    ]);
    assert_eq!(config::apply(&file.then(others)).unwrap(), 1);
    assert_eq!(
        policy.tuning().timeout,
        Some(2 * SECOND),
        "the file applied"
    );
    assert_eq!(policy.retries(), 1, "and the variable naming the policy");

    let mistakes = [
        ("RESIL_RECONF__ENV__TIMOUT", "did you mean `timeout`"),
        ("RESIL_RECONF__ENVV__TIMEOUT", "did you mean `reconf::env`"),
        ("RESIL_RECONF_ENV_TIMEOUT", "RESIL_BILLING__CHARGE__TIMEOUT"),
    ];
    for (variable, fix) in mistakes {
        let refused = config::apply(&vars(&[(variable, "1s")])).unwrap_err();
        assert!(
            refused.to_string().contains(fix),
            "{variable} is near a policy's and refused with the fix: {refused}"
        );
    }
    assert_eq!(policy.retries(), 1, "nothing applied");
    let another = vars(&[("RESIL_HTTP_TIMEOUT", "1s"), ("RESIL_WORKER_RETRY", "3")]);
    assert_eq!(
        config::apply(&another).unwrap(),
        1,
        "ignored: back to the defaults"
    );
    config::apply(&Overrides::default()).unwrap();
}

/// Policies built with one name (a policy per client instance, or the builder's unnamed
/// ones) are each configured by what the configuration says of that name.
#[test]
fn every_policy_of_a_name_is_configured() {
    let _turn = TURN.blocking_lock();
    let twins: Vec<Policy> = (0..2)
        .map(|_| {
            Policy::builder()
                .name("reconf::twin")
                .timeout(10 * SECOND)
                .build()
                .unwrap()
        })
        .collect();
    let changed = config::apply(&parse("[\"reconf::twin\"]\ntimeout = \"1s\"\n")).unwrap();
    assert_eq!(changed, 2);
    for twin in &twins {
        assert_eq!(twin.tuning().timeout, Some(SECOND));
    }
    config::apply(&Overrides::default()).unwrap();
}

/// A configuration applied while a tuning is set by hand never undoes the hand's: each apply
/// holds the policy from its check to its apply, and writes its keys over the latest defaults.
#[test]
fn a_configuration_applied_meanwhile_never_undoes_a_tuning_set_by_hand() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let _turn = TURN.blocking_lock();
    let policy = Policy::builder()
        .name("reconf::race")
        .timeout(10 * SECOND)
        .build()
        .unwrap();
    let done = AtomicBool::new(false);
    let retry = std::thread::scope(|scope| {
        scope.spawn(|| {
            for n in 0..5_000u64 {
                let ms = 1000 + n % 2 * 1000;
                let text = format!("[\"reconf::race\"]\ntimeout = \"{ms}ms\"\n");
                config::apply(&parse(&text)).unwrap();
            }
            done.store(true, Ordering::Relaxed);
        });
        // While the other thread applies thousands of configurations.
        let mut retry = 0;
        while !done.load(Ordering::Relaxed) {
            assert_eq!(
                policy.retries(),
                retry,
                "a configuration undid the hand's tuning"
            );
            retry += 1;
            let mut tuning = policy.tuning();
            tuning.retry = retry;
            policy.set_tuning(tuning).unwrap();
        }
        retry
    });
    assert_eq!(
        policy.retries(),
        retry,
        "a configuration undid the hand's tuning"
    );
    config::apply(&Overrides::default()).unwrap();
}
