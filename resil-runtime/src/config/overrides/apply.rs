//! Applying overrides: every policy's tuning computed from its defaults, the profiles and the
//! overrides, all checked before any applies; then loaded from a file, or watched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use resil_spec::names::did_you_mean;
use resil_spec::profiles;

use super::{Overrides, Problem, Refused, Setting, Value};
use crate::events::{self, Event};
use crate::policy::{policies_built, registered_tunings, Overlay, Revising, Tuning};
use crate::Backoff;

/// The values of the profile called `name`: the configuration's own (a later definition of a
/// key wins), else a built-in one.
fn profile_values(name: &str, defined: &[Setting]) -> Option<Vec<Value>> {
    let own: Vec<Value> = defined
        .iter()
        .filter(|setting| setting.site == name)
        .map(|setting| setting.value.clone())
        .collect();
    if !own.is_empty() {
        return Some(own);
    }
    let preset = profiles::named(name)?;
    let mut values = Vec::new();
    values.extend(preset.timeout.map(Value::Timeout));
    values.extend(preset.retry.map(Value::Retry));
    values.extend(preset.backoff.map(|(base, cap)| Value::Backoff(base, cap)));
    values.extend(preset.jitter.map(Value::Jitter));
    values.extend(preset.retry_after_max.map(Value::RetryAfterMax));
    Some(values)
}

/// `base` with `settings` written over it, in order, after the profile they name (whose
/// values the keys beside it override).
fn tuned(base: &Tuning, settings: &[Setting], defined: &[Setting]) -> Tuning {
    let profile = settings
        .iter()
        .rev()
        .find_map(|setting| match &setting.value {
            Value::Profile(name) => profile_values(name, defined),
            _ => None,
        });
    let values = profile
        .into_iter()
        .flatten()
        .chain(settings.iter().map(|setting| setting.value.clone()));
    let mut tuning = base.clone();
    let mut backoff = None;
    let mut jitter = None;
    for value in values {
        match value {
            Value::Profile(_) => {}
            Value::Enabled(on) => tuning.enabled = on,
            Value::Timeout(timeout) => tuning.timeout = Some(timeout),
            Value::Deadline(deadline) => tuning.deadline = Some(deadline),
            Value::Idle(idle) => tuning.idle = Some(idle),
            Value::Retry(retry) => tuning.retry = retry,
            Value::RetryAfterMax(longest) => tuning.retry_after_max = longest,
            Value::Backoff(base, cap) => backoff = Some((base, cap)),
            Value::Jitter(drawn) => jitter = Some(drawn),
        }
    }
    if backoff.is_some() || jitter.is_some() {
        let (base, cap) = backoff.unwrap_or((tuning.backoff.base(), tuning.backoff.cap()));
        let jitter = jitter.unwrap_or(tuning.backoff.jitter());
        // The range was checked when parsed.
        if let Ok(drawn) = Backoff::new(base, cap) {
            tuning.backoff = drawn.with_jitter(jitter);
        }
    }
    tuning
}

/// Checks `overrides` against the policies that exist and against each other, then, if
/// everything holds, makes them the policies' tunings for new operations: every policy the
/// overrides do not mention returns to its defaults. Returns how many policies changed. If
/// anything is wrong nothing is applied, and the listeners hear why.
pub fn apply(overrides: &Overrides) -> Result<usize, Refused> {
    check_and_apply(overrides).map_err(announce)
}

/// Tells the listeners that a configuration was refused, and why.
fn announce(refused: Refused) -> Refused {
    if let Some(listener) = events::resolve(None) {
        listener.on_event(&Event::ConfigRefused {
            origin: &refused.origin,
            message: &refused.to_string(),
        });
    }
    refused
}

fn check_and_apply(overrides: &Overrides) -> Result<usize, Refused> {
    let policies = registered_tunings();
    // Every policy held still from the check to the apply, so what is checked is what applies.
    let mut revising: Vec<Revising<'_>> = policies.iter().map(|policy| policy.revise()).collect();
    let names: Vec<&str> = revising.iter().map(|policy| policy.name()).collect();
    let known = |site: &str| {
        names.contains(&site) || overrides.expected.iter().any(|expected| expected == site)
    };
    let mut problems = Vec::new();
    let mut by_site: BTreeMap<&str, Vec<Setting>> = BTreeMap::new();
    for setting in &overrides.settings {
        // Another program's `RESIL_<X>__<Y>` names no policy: not configuration, unless its
        // name is so close to a policy's that it is a typo.
        if setting.from_env && !known(&setting.site) {
            if let Some(name) = did_you_mean(&setting.site, names.iter().copied()) {
                problems.push(Problem {
                    at: setting.at.clone(),
                    site: setting.site.clone(),
                    key: setting.key.to_owned(),
                    message: format!("no policy has this name (did you mean `{name}`?): write the policy's name with `__` for `::`, such as RESIL_BILLING__CHARGE__TIMEOUT for billing::charge"),
                });
            }
            continue;
        }
        by_site
            .entry(&setting.site)
            .or_default()
            .push(setting.clone());
    }
    problems.extend(
        (overrides.unresolved.iter())
            .filter(|problem| known(&problem.site))
            .cloned(),
    );
    let flat = |name: &str| name.replace("::", "_");
    problems.extend(
        (overrides.misspelt.iter())
            .filter(|(site, _)| names.iter().any(|name| flat(name) == *site))
            .map(|(_, problem)| problem.clone()),
    );
    for (site, settings) in &by_site {
        if !known(site) {
            let hint = did_you_mean(site, names.iter().copied())
                .map_or_else(String::new, |name| format!(" (did you mean `{name}`?)"));
            problems.push(Problem {
                at: settings[0].at.clone(),
                site: (*site).to_owned(),
                key: String::new(),
                message: format!("no policy has this name{hint}: a policy is named by `.name(…)`, a #[resilient] function by its path, and known from its first call; list a function not called yet with Overrides::expect"),
            });
        }
    }
    let mut tunings = Vec::with_capacity(revising.len());
    for policy in &revising {
        // Cloned, not taken: policies may share a name, and each gets what it says.
        let settings = by_site.get(policy.name()).cloned().unwrap_or_default();
        for setting in &settings {
            if let Value::Profile(name) = &setting.value {
                if profile_values(name, &overrides.profiles).is_none() {
                    problems.push(unknown_profile(policy.name(), setting, name, overrides));
                }
            }
        }
        let tuning = tuned(policy.defaults(), &settings, &overrides.profiles);
        if let Err(rule) = tuning.check() {
            let last = settings.last();
            problems.push(Problem {
                at: last.map_or_else(String::new, |s| s.at.clone()),
                site: policy.name().to_owned(),
                key: last.map_or_else(String::new, |s| s.key.to_owned()),
                message: rule.to_string(),
            });
        }
        // Kept, to write over the defaults a tuning set by hand later makes.
        let overlay = (!settings.is_empty()).then(|| {
            let profiles = overrides.profiles.clone();
            Arc::new(move |defaults: &Tuning| tuned(defaults, &settings, &profiles)) as Overlay
        });
        tunings.push((overlay, tuning));
    }
    if !problems.is_empty() {
        return Err(Refused {
            origin: overrides.origin.clone(),
            problems,
        });
    }
    let mut changed = Vec::new();
    for (policy, (overlay, tuning)) in revising.iter_mut().zip(tunings) {
        if policy.configure(overlay, tuning) {
            changed.push(policy.name().to_owned());
        }
    }
    // The tunings are in place before any listener hears of them.
    drop(revising);
    if let Some(listener) = events::resolve(None) {
        for site in &changed {
            listener.on_event(&Event::Reconfigured { site });
        }
    }
    Ok(changed.len())
}

fn unknown_profile(site: &str, setting: &Setting, name: &str, overrides: &Overrides) -> Problem {
    let defined = overrides.profiles.iter().map(|s| s.site.as_str());
    let known: Vec<&str> = profiles::ALL
        .iter()
        .map(|p| p.name)
        .chain(defined)
        .collect();
    let hint = did_you_mean(name, known.iter().copied())
        .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
    Problem {
        at: setting.at.clone(),
        site: site.to_owned(),
        key: "profile".to_owned(),
        message: format!(
            "unknown profile \"{name}\"{hint}: use a built-in one ({}) or define it under [profiles.{name}]",
            profiles::ALL.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Reads `path`, then the environment, and applies both (see [`apply`]); a refusal, whether
/// of the file, a variable or the whole, reaches the listeners.
pub fn load(path: impl AsRef<Path>) -> Result<usize, Refused> {
    let overrides = Overrides::from_file(path)
        .and_then(|file| Ok(file.then(Overrides::from_env()?)))
        .map_err(announce)?;
    apply(&overrides)
}

/// Loads `path` now and again whenever its contents change, looking every `every`, for as
/// long as the returned task runs (abort it to stop). A refused version changes nothing and
/// is announced to the listeners; the task keeps watching for the next one. A policy built
/// since the last load (a function called for the first time, a policy built at run time) is
/// configured at the next look: the file is read again, and a version refused for naming a
/// policy that did not exist yet applies once it does.
pub fn watch(path: impl Into<PathBuf>, every: Duration) -> tokio::task::JoinHandle<()> {
    let path = path.into();
    let every = every.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut seen: Option<(Result<String, std::io::ErrorKind>, u64)> = None;
        loop {
            let now = std::fs::read_to_string(&path).map_err(|error| error.kind());
            let built = policies_built();
            if seen.as_ref() != Some(&(now.clone(), built)) {
                // A refusal reaches the listeners from `load`; the last good tuning stays.
                let _ = load(&path);
                seen = Some((now, built));
            }
            tokio::time::sleep(every).await;
        }
    })
}
