//! Overrides from a TOML file and from environment variables: parsed, checked as a whole,
//! applied to the policies by name.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use resil_spec::names::did_you_mean;
use resil_spec::{duration, rules, Jitter};
use toml::Spanned;

mod apply;

pub use apply::{apply, load, watch};

/// The keys a configuration may set, in the order the docs present them.
const KEYS: [&str; 9] = [
    "profile",
    "enabled",
    "timeout",
    "deadline",
    "idle_timeout",
    "retry",
    "retry_after_max",
    "backoff",
    "jitter",
];

/// A value as its source wrote it.
enum Raw {
    Text(String),
    Integer(i64),
    Bool(bool),
    Other(&'static str),
}

/// One value, parsed.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    /// A built-in profile, or one the configuration defines under `[profiles.<name>]`.
    Profile(String),
    Enabled(bool),
    Timeout(Duration),
    Deadline(Duration),
    Idle(Duration),
    Retry(u32),
    RetryAfterMax(Duration),
    Backoff(Duration, Duration),
    Jitter(Jitter),
}

#[derive(Debug, Clone)]
struct Setting {
    site: String,
    key: &'static str,
    value: Value,
    /// Where it was written: `resil.toml:12`, or the variable's name.
    at: String,
    /// Set by a variable: configuration only if its policy exists.
    from_env: bool,
}

/// Overrides for policies by name, parsed and each value checked; [`apply`] checks them
/// against the policies and against each other.
///
/// ```
/// use resil_runtime::config::Overrides;
///
/// let file = Overrides::parse("[\"billing::charge\"]\ntimeout = \"5s\"\n", "resil.toml").unwrap();
/// let env = Overrides::from_vars([("RESIL_BILLING__CHARGE__RETRY".to_owned(), "1".to_owned())]).unwrap();
/// let both = file.then(env);
/// assert_eq!(both.len(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    settings: Vec<Setting>,
    /// Problems of variables, which are problems only if their policy exists.
    unresolved: Vec<Problem>,
    /// Variables that end with a key without the `__` form (`RESIL_BILLING_CHARGE_TIMEOUT`),
    /// by the name they would give a policy with `_` for `::` (`billing_charge`): misspelt
    /// overrides if a policy has that name, another program's otherwise.
    misspelt: Vec<(String, Problem)>,
    /// The profiles the configuration defines: `site` is the profile's name.
    profiles: Vec<Setting>,
    expected: Vec<String>,
    origin: String,
}

/// One problem of a configuration: where, which policy and key, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// Where it was written: `resil.toml:12`, or the environment variable.
    pub at: String,
    /// The policy's name, if the problem is one policy's.
    pub site: String,
    /// The key, if the problem is one key's.
    pub key: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.at)?;
        if !self.site.is_empty() {
            write!(f, " [{}]", self.site)?;
        }
        if !self.key.is_empty() {
            write!(f, " {}:", self.key)?;
        }
        write!(f, " {}", self.message)
    }
}

/// A configuration that was refused as a whole: every problem found. Nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// What was read: a file's path, `environment`, or both.
    pub origin: String,
    /// Every problem, in the order found.
    pub problems: Vec<Problem>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "configuration from {} refused ({} problem{}); every policy keeps its tuning",
            self.origin,
            self.problems.len(),
            if self.problems.len() == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refused {}

impl Overrides {
    /// Parses a TOML text: one table per policy, named as the policy is (quoted, since names
    /// hold `::`). `origin` names the text in problems (a file's path).
    pub fn parse(text: &str, origin: &str) -> Result<Self, Refused> {
        type Tables = BTreeMap<Spanned<String>, BTreeMap<Spanned<String>, Spanned<toml::Value>>>;
        let refused = |problems| Refused {
            origin: origin.to_owned(),
            problems,
        };
        let line = |offset: usize| {
            let line = text[..offset.min(text.len())].matches('\n').count() + 1;
            format!("{origin}:{line}")
        };
        let tables: Tables = toml::from_str(text).map_err(|error| {
            let at = error.span().map_or_else(|| origin.to_owned(), |span| line(span.start));
            refused(vec![Problem {
                at,
                site: String::new(),
                key: String::new(),
                message: format!(
                    "{}; write one table per policy, such as [\"billing::charge\"] then timeout = \"5s\"",
                    error.message()
                ),
            }])
        })?;
        let mut overrides = Overrides::default();
        // In the order written, for the settings (a later one wins) and the problems alike.
        let mut entries: Vec<_> = tables
            .into_iter()
            .flat_map(|(site, keys)| {
                keys.into_iter()
                    .map(move |(key, value)| (key.span().start, site.get_ref().clone(), key, value))
            })
            .collect();
        entries.sort_by_key(|(offset, ..)| *offset);
        let mut problems = Vec::new();
        for (offset, site, key, value) in entries {
            let at = line(offset);
            if site == "profiles" {
                // `[profiles.<name>]`: a profile of the configuration's own.
                let Some(table) = value.get_ref().as_table() else {
                    problems.push(Problem {
                        at,
                        site: format!("profiles.{}", key.get_ref()),
                        key: String::new(),
                        message: "is a profile: write it as a table, such as [profiles.partner_api] then timeout = \"2s\"".to_owned(),
                    });
                    continue;
                };
                for (setting, value) in table {
                    let mut defined = Overrides::default();
                    defined.add(
                        key.get_ref(),
                        setting,
                        raw(value),
                        at.clone(),
                        &mut problems,
                    );
                    for setting in defined.settings {
                        if matches!(setting.value, Value::Profile(_)) {
                            problems.push(Problem {
                                at: setting.at,
                                site: format!("profiles.{}", setting.site),
                                key: "profile".to_owned(),
                                message: "a profile cannot start from another: write its values"
                                    .to_owned(),
                            });
                        } else {
                            overrides.profiles.push(setting);
                        }
                    }
                }
                continue;
            }
            overrides.add(
                &site,
                key.get_ref(),
                raw(value.get_ref()),
                at,
                &mut problems,
            );
        }
        overrides.origin = origin.to_owned();
        if problems.is_empty() {
            Ok(overrides)
        } else {
            Err(refused(problems))
        }
    }

    /// Reads `path` and parses it (see [`Overrides::parse`]). An empty file is refused: it is
    /// what a reload catches between `std::fs::write`'s truncation and its write, and applying
    /// it would return every policy to its defaults. Write a new version beside the file and
    /// rename it over (an atomic replace); to set nothing, leave a comment in it.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Refused> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let refused = |message: String| Refused {
            origin: origin.clone(),
            problems: vec![Problem {
                at: origin.clone(),
                site: String::new(),
                key: String::new(),
                message,
            }],
        };
        match std::fs::read_to_string(path) {
            Ok(text) if text.trim().is_empty() => Err(refused("is empty, as a file caught while being written is: write the new version beside it and rename it over this one; to set nothing, leave a comment in it".to_owned())),
            Ok(text) => Self::parse(&text, &origin),
            Err(error) => Err(refused(format!(
                "cannot be read ({error}): check the path and its permissions"
            ))),
        }
    }

    /// The process's `RESIL_<NAME>__<KEY>` variables (see [`Overrides::from_vars`]).
    pub fn from_env() -> Result<Self, Refused> {
        Self::from_vars(std::env::vars())
    }

    /// Variables `RESIL_<NAME>__<KEY>=value`: the name's `::` written `__`, upper or lower
    /// case (`RESIL_BILLING__CHARGE__TIMEOUT=5s`). Only a variable that names a policy is
    /// configuration: other programs' variables that start with `RESIL_` too are ignored
    /// when [`apply`] finds no policy of that name (`RESIL_CACHE__DIR`, `RESIL_HTTP_TIMEOUT`),
    /// and so are their problems. [`apply`] refuses, with the fix, one whose policy name is
    /// close to a policy's (a typo), and one not of the form whose name, with `_` for `::`,
    /// is a policy's (`RESIL_BILLING_CHARGE_TIMEOUT`: a misspelt override).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, Refused> {
        let mut overrides = Overrides {
            origin: "environment".to_owned(),
            ..Overrides::default()
        };
        for (name, value) in vars {
            let Some(rest) = name.strip_prefix("RESIL_") else {
                continue;
            };
            let Some((site, key)) = rest.rsplit_once("__") else {
                // Not of the form: another program's variable (RESIL_SOAK_OPERATIONS,
                // RESIL_HTTP_TIMEOUT), unless a policy has the name before its key, as a
                // misspelt override would (RESIL_BILLING_CHARGE_TIMEOUT).
                let misspelt = rest
                    .rsplit_once('_')
                    .filter(|(_, tail)| KEYS.contains(&tail.to_lowercase().as_str()));
                if let Some((flat, _)) = misspelt {
                    let problem = Problem {
                        at: name.clone(),
                        site: String::new(),
                        key: String::new(),
                        message: "is not RESIL_<NAME>__<KEY>: write the policy's name with `__` for `::`, then `__` and the key, such as RESIL_BILLING__CHARGE__TIMEOUT".to_owned(),
                    };
                    overrides.misspelt.push((flat.to_lowercase(), problem));
                }
                continue;
            };
            let site = site.to_lowercase().replace("__", "::");
            let raw = match value.trim() {
                "true" => Raw::Bool(true),
                "false" => Raw::Bool(false),
                text => text
                    .parse()
                    .map_or_else(|_| Raw::Text(text.to_owned()), Raw::Integer),
            };
            let mut unresolved = Vec::new();
            overrides.add(
                &site,
                &key.to_lowercase(),
                raw,
                name.clone(),
                &mut unresolved,
            );
            overrides.unresolved.extend(unresolved);
        }
        for setting in &mut overrides.settings {
            setting.from_env = true;
        }
        Ok(overrides)
    }

    /// These overrides, then `later`'s: where both set a key, `later` wins (a file, then the
    /// environment).
    pub fn then(mut self, later: Overrides) -> Self {
        self.settings.extend(later.settings);
        self.unresolved.extend(later.unresolved);
        self.misspelt.extend(later.misspelt);
        self.profiles.extend(later.profiles);
        self.expected.extend(later.expected);
        self.origin = match (self.origin.is_empty(), later.origin.is_empty()) {
            (_, true) => self.origin,
            (true, false) => later.origin,
            (false, false) => format!("{} and {}", self.origin, later.origin),
        };
        self
    }

    /// Accepts overrides for a policy that does not exist yet (a `#[resilient]` function not
    /// called yet) instead of reporting its name as unknown.
    pub fn expect(mut self, site: &str) -> Self {
        self.expected.push(site.to_owned());
        self
    }

    /// The values set.
    pub fn len(&self) -> usize {
        self.settings.len()
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    fn add(&mut self, site: &str, key: &str, raw: Raw, at: String, problems: &mut Vec<Problem>) {
        let problem = |key: &str, message: String| Problem {
            at: at.clone(),
            site: site.to_owned(),
            key: key.to_owned(),
            message,
        };
        let Some(key) = KEYS.iter().copied().find(|known| *known == key) else {
            let hint = did_you_mean(key, KEYS)
                .map_or_else(String::new, |known| format!(" (did you mean `{known}`?)"));
            problems.push(problem(
                key,
                format!("unknown key{hint}: the keys are {}", KEYS.join(", ")),
            ));
            return;
        };
        match value(key, raw) {
            Ok(value) => self.settings.push(Setting {
                site: site.to_owned(),
                key,
                value,
                at,
                from_env: false,
            }),
            Err(message) => problems.push(problem(key, message)),
        }
    }
}

/// A TOML value as the parser of values takes it.
fn raw(value: &toml::Value) -> Raw {
    match value {
        toml::Value::String(text) => Raw::Text(text.clone()),
        toml::Value::Integer(n) => Raw::Integer(*n),
        toml::Value::Boolean(b) => Raw::Bool(*b),
        other => Raw::Other(other.type_str()),
    }
}

/// What a value of `key` looks like.
fn example(key: &str) -> &'static str {
    match key {
        "enabled" => "enabled = false",
        "profile" => "profile = \"llm\"",
        "retry" => "retry = 2",
        "backoff" => "backoff = \"300ms..8s\"",
        "jitter" => "jitter = \"full\"",
        _ => "timeout = \"5s\"",
    }
}

/// Parses the value of `key`, or says what it should look like.
fn value(key: &'static str, raw: Raw) -> Result<Value, String> {
    if let Raw::Other(kind) = raw {
        return Err(format!("cannot be a {kind}: write it as {}", example(key)));
    }
    let text = |raw: Raw| match raw {
        Raw::Text(text) => Ok(text),
        _ => Err(format!("takes a string, such as {}", example(key))),
    };
    let positive = |raw: Raw| {
        let text = text(raw)?;
        let duration = duration::parse(&text)?;
        rules::positive(key, duration).map_err(|rule| rule.to_string())?;
        Ok::<_, String>(duration)
    };
    Ok(match key {
        "profile" => Value::Profile(text(raw)?),
        "enabled" => match raw {
            Raw::Bool(on) => Value::Enabled(on),
            _ => return Err("takes true or false".to_owned()),
        },
        "timeout" => Value::Timeout(positive(raw)?),
        "deadline" => Value::Deadline(positive(raw)?),
        "idle_timeout" => Value::Idle(positive(raw)?),
        "retry_after_max" => Value::RetryAfterMax(duration::parse(&text(raw)?)?),
        "retry" => match raw {
            Raw::Integer(n) => Value::Retry(u32::try_from(n).map_err(|_| {
                format!(
                    "takes a whole number from 0 to {}, such as retry = 2",
                    u32::MAX
                )
            })?),
            _ => return Err("takes a whole number, such as retry = 2".to_owned()),
        },
        "backoff" => {
            let (base, cap) = duration::parse_range(&text(raw)?)?;
            Value::Backoff(base, cap)
        }
        "jitter" => {
            let name = text(raw)?;
            let known = Jitter::ALL.iter().map(|(known, _)| *known);
            match Jitter::from_name(&name) {
                Some(jitter) => Value::Jitter(jitter),
                None => {
                    let hint = did_you_mean(&name, known)
                        .map_or_else(String::new, |known| format!(" (did you mean \"{known}\"?)"));
                    return Err(format!("unknown jitter \"{name}\"{hint}: use \"full\", \"equal\", \"decorrelated\" or \"none\""));
                }
            }
        }
        _ => return Err(format!("takes a value: {key}")),
    })
}
