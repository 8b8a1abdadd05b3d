//! [`Jitter`]: how a wait is drawn from the exponential envelope.

/// How a wait is drawn from the exponential envelope `min(cap, base·2ⁿ)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform in `[0, envelope]`: the default, and the best at spreading clients apart.
    #[default]
    Full,
    /// Half the envelope plus uniform in `[0, envelope/2]`: never shorter than half.
    Equal,
    /// Uniform in `[base, 3 × previous wait]`, capped: grows from the last wait, not `n`.
    Decorrelated,
    /// Exactly the envelope: every client waits the same, so they retry in lockstep.
    None,
}

impl Jitter {
    /// Every jitter, with the name `jitter = "..."` takes.
    pub const ALL: [(&'static str, Jitter); 4] = [
        ("full", Jitter::Full),
        ("equal", Jitter::Equal),
        ("decorrelated", Jitter::Decorrelated),
        ("none", Jitter::None),
    ];

    /// The jitter called `name`, as the attribute writes it.
    ///
    /// ```
    /// use resil_spec::Jitter;
    /// assert_eq!(Jitter::from_name("none"), Some(Jitter::None));
    /// assert_eq!(Jitter::from_name("random"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Jitter> {
        Self::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, jitter)| *jitter)
    }

    /// Its name in the attribute: `"full"`, `"equal"`, `"decorrelated"`, `"none"`.
    pub fn name(self) -> &'static str {
        match self {
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
            Jitter::None => "none",
        }
    }

    /// Its variant's name, for generated code: `"Full"`, ...
    pub fn variant(self) -> &'static str {
        match self {
            Jitter::Full => "Full",
            Jitter::Equal => "Equal",
            Jitter::Decorrelated => "Decorrelated",
            Jitter::None => "None",
        }
    }
}
