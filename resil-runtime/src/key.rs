//! [`Key`]: a value that keys a breaker, a bulkhead or a rate gate, and the one bounded name it
//! gets ([`KeyName`]), which is what keyed state is shown as and shared under.
//!
//! Here, in this process, two keys share state only when they are equal as values: strings
//! (`str`, `String`, `Arc<str>`, `char`...) by their text, integers by their value whatever
//! their type, and a key of any other type by its type and what its `Hash` writes, whatever it
//! prints as (two unequal tenants that print alike, or two types of one name, stay apart). That
//! part is kept as a SHA-256, so its cost is bounded whatever the value holds, and a hostile
//! value cannot be made to collide with another.
//!
//! The name is what a store shared by many instances (Redis) and the metrics see, so it is
//! made of the key's text only, the same in every build and every instance. It tells apart
//! every two strings and integers, whatever a request puts in them (`,`, `=`, `"`, newlines,
//! a megabyte); a key of another type is named by its `Display`, which must therefore print
//! distinct values distinctly, and alike in every build, for state shared through a store.
//! The encoding, part by part:
//! - a string (or a `char`, or a value of another type, as it prints) is written as it is when
//!   it is made of letters, digits and `- _ . / @ + ~` and does not read as a number or a
//!   boolean; otherwise it is quoted and escaped as Rust writes a string literal
//!   (`"gpt-4o, mini"`);
//! - an integer or a boolean is written as it prints (`42`, `true`): integers of different
//!   types are the same key when their values are equal;
//! - a [`KeyTuple`] is `(part, part)`.
//!
//! No plain string contains `"`, `(`, `)`, `,` or `#`, and every quoted part ends at its first
//! unescaped `"`, so the name can be read back into its parts: distinct texts, distinct names.
//! A name longer than [`MAX_KEY_BYTES`] is kept as `#` + the SHA-256 of the whole name + `:` +
//! its start: bounded, the same in every instance (a Redis key is made from it), and a hostile
//! key cannot be made to collide with another's.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::fmt::{self, Display, Write};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The most bytes a key's name takes (the name breakers, metrics and Redis see); a longer
/// name is kept as a digest of the whole and its start.
pub const MAX_KEY_BYTES: usize = 256;

/// A value that can key a breaker, a bulkhead or a rate gate: `str`, `String`, integers, any
/// `Clone + Hash + Eq + Display + Send + Sync + 'static` type (an enum of models, a tenant
/// id...), or a [`KeyTuple`] of those (per `(provider, model)`).
///
/// In this process a key is found by its value (see the module docs): strings by their text,
/// integers by their value, other types by what their `Hash` writes (kept as its SHA-256, so a
/// key of a megabyte costs what one of a byte does), which for a `Hash` and an `Eq` that agree,
/// as derived ones do, tells apart every two unequal values, whatever they print as. Its name,
/// shown in events and metrics and used as its key in a shared store, is its text: `gpt-4o` stays `gpt-4o`, `"gpt-4o, mini"` is quoted, `42u32`
/// is `42`, and a value of another type is named as it prints (`Model::Large` printing `large`
/// is `large`). For a policy shared through Redis (`shared = true`), a key type's `Display`
/// must print distinct values distinctly, and alike in every build and instance: two values
/// that print alike share the store's state (and their metrics' series). A lookup allocates
/// nothing for a key seen before.
///
/// ```
/// use resil_runtime::{BreakerConfig, KeyTuple, KeyedBreakers};
///
/// let breakers = KeyedBreakers::new("(provider, model)", BreakerConfig::default());
/// assert_eq!(breakers.get(&KeyTuple(("openai", "gpt-4o"))).key(), Some("(openai, gpt-4o)"));
/// assert_eq!(
///     breakers.get(&KeyTuple(("openai, gpt-4o", "mini"))).key(),
///     Some(r#"("openai, gpt-4o", mini)"#),
/// );
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot key a breaker, bulkhead or rate gate",
    note = "a key must be `str`, `String`, a tuple of keys, or a `Clone + Hash + Eq + Display + Send + Sync + 'static` type; a key expression whose value is a reference to one (`req.model()` returning `&str`) keys by the value it points to"
)]
pub trait Key: sealed::Sealed {
    /// Writes the key's unambiguous name (see the module docs).
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;

    /// The key's text when it is a string: a lookup first looks for it among the entries named
    /// by their own text, and writes the name only when it finds none.
    #[doc(hidden)]
    fn text(&self) -> Option<&str> {
        None
    }

    /// Hands `visit` the parts of the key that are neither strings nor integers, in order:
    /// what tells apart, beside the name, two keys that print alike.
    #[doc(hidden)]
    fn values<'k>(&'k self, _visit: &mut dyn FnMut(&'k dyn KeyValue)) {}
}

/// A key's part told apart by what it is: its type and what its `Hash` writes.
#[doc(hidden)]
pub trait KeyValue: Send + Sync + 'static {
    /// Feeds the type and the value to `state`.
    fn hash_into(&self, state: &mut dyn Hasher);
}

impl<T: Hash + Send + Sync + 'static> KeyValue for T {
    fn hash_into(&self, mut state: &mut dyn Hasher) {
        TypeId::of::<T>().hash(&mut state);
        self.hash(&mut state);
    }
}

mod sealed {
    /// The encoding is what keeps keys apart: only resil's impls may write it.
    pub trait Sealed {}
    impl Sealed for str {}
    impl<T: Clone + std::hash::Hash + Eq + std::fmt::Display + Send + Sync + 'static> Sealed for T {}
}

#[diagnostic::do_not_recommend]
impl Key for str {
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_string(self, f)
    }

    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

// Not named in errors: a type that is no key is reported as not `Key`, once, with the trait's
// note that lists what keys; not as missing each bound of this impl in turn.
#[diagnostic::do_not_recommend]
impl<T: Clone + Hash + Eq + Display + Send + Sync + 'static> Key for T {
    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match kind::<T>() {
            Kind::String | Kind::Other => write_string(self, f),
            Kind::Literal => Display::fmt(self, f),
        }
    }

    fn values<'k>(&'k self, visit: &mut dyn FnMut(&'k dyn KeyValue)) {
        if let Kind::Other = kind::<T>() {
            visit(self);
        }
    }

    fn text(&self) -> Option<&str> {
        let any: &dyn Any = self;
        (any.downcast_ref::<String>().map(String::as_str))
            .or_else(|| any.downcast_ref::<&'static str>().copied())
            .or_else(|| any.downcast_ref::<Arc<str>>().map(|text| &**text))
            .or_else(|| any.downcast_ref::<Box<str>>().map(|text| &**text))
            .or_else(|| any.downcast_ref::<Cow<'static, str>>().map(|text| &**text))
    }
}

enum Kind {
    /// Compared as text with `str` keys.
    String,
    /// Prints as nothing a plain string can print as: integers and booleans.
    Literal,
    /// Told apart by its type and what its `Hash` writes, named as it prints.
    Other,
}

fn kind<T: 'static>() -> Kind {
    let id = TypeId::of::<T>();
    let any = |ids: &[TypeId]| ids.contains(&id);
    if any(&[
        TypeId::of::<String>(),
        TypeId::of::<&'static str>(),
        TypeId::of::<Box<str>>(),
        TypeId::of::<Arc<str>>(),
        TypeId::of::<Cow<'static, str>>(),
        TypeId::of::<char>(),
    ]) {
        Kind::String
    } else if any(&[
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<u128>(),
        TypeId::of::<usize>(),
        TypeId::of::<i8>(),
        TypeId::of::<i16>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<i128>(),
        TypeId::of::<isize>(),
        TypeId::of::<bool>(),
    ]) {
        Kind::Literal
    } else {
        Kind::Other
    }
}

/// A string as it is when that cannot be mistaken for anything else, else quoted. Takes the
/// text as `Display` and reads it twice, so a `String` key is named without a copy.
fn write_string(text: &(impl Display + ?Sized), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut look = Look::default();
    let _ = write!(look, "{text}");
    if look.plain() {
        return write!(f, "{text}");
    }
    f.write_char('"')?;
    write!(Escaped(&mut *f), "{text}")?;
    f.write_char('"')
}

/// Whether `text` is its own name: short enough to keep whole (what [`Look`] does not see:
/// [`KeyName`] cuts a longer name), and needing no quotes (what [`Look`] finds), read in one
/// pass over the whole text.
pub(crate) fn is_plain(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_KEY_BYTES || text == "true" || text == "false" {
        return false;
    }
    let number =
        text != "-" && (text.strip_prefix('-').unwrap_or(text).bytes()).all(|b| b.is_ascii_digit());
    // One pass over the bytes while they are ASCII; Unicode's tables only for the rest.
    for (at, &byte) in text.as_bytes().iter().enumerate() {
        match PLAIN_ASCII.get(usize::from(byte)) {
            Some(true) => {}
            Some(false) => return false,
            None => return !number && text[at..].chars().all(plain_char),
        }
    }
    !number
}

/// Which ASCII characters can stand in an unquoted name: letters, digits and `- _ . / @ + ~`.
const PLAIN_ASCII: [bool; 128] = {
    let mut plain = [false; 128];
    let mut byte = 0u8;
    while byte < 128 {
        plain[byte as usize] = byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'/' | b'@' | b'+' | b'~');
        byte += 1;
    }
    plain
};

/// Whether `c` can stand in an unquoted name: see [`PLAIN_ASCII`]; beyond ASCII, any letter or
/// digit.
#[inline]
fn plain_char(c: char) -> bool {
    match u8::try_from(c) {
        Ok(byte) if byte.is_ascii() => PLAIN_ASCII[usize::from(byte)],
        _ => c.is_alphanumeric(),
    }
}

/// What a string looks like, seen a piece at a time: whether it can stand unquoted.
#[derive(Default)]
struct Look {
    len: usize,
    /// Only letters, digits and `- _ . / @ + ~`.
    plain_chars: bool,
    /// Only ASCII digits after an optional leading `-`, so far.
    digits: bool,
    /// Its first five bytes, to tell `true` and `false`.
    start: [u8; 5],
}

impl Look {
    fn plain(&self) -> bool {
        let start = &self.start[..self.len.min(5)];
        let number = self.digits && start != b"-";
        let boolean = (self.len == 4 && start == b"true") || (self.len == 5 && start == b"false");
        self.len > 0 && self.plain_chars && !number && !boolean
    }
}

impl Write for Look {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for (i, c) in text.char_indices() {
            let at = self.len + i;
            if at == 0 {
                self.plain_chars = true;
                self.digits = true;
            }
            self.plain_chars &= plain_char(c);
            self.digits &= c.is_ascii_digit() || (at == 0 && c == '-');
        }
        for (i, byte) in text.bytes().enumerate() {
            if let Some(slot) = self.start.get_mut(self.len + i) {
                *slot = byte;
            }
        }
        self.len += text.len();
        Ok(())
    }
}

/// Writes text escaped for the inside of a quoted part: `"`, `\` and control characters as
/// Rust escapes them, everything else as it is.
struct Escaped<W>(W);

impl<W: Write> Write for Escaped<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for c in text.chars() {
            if c == '"' || c == '\\' || c.is_control() {
                write!(self.0, "{}", c.escape_default())?;
            } else {
                self.0.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// Several keys as one: `KeyTuple((provider, model))` keys per pair, named
/// `(openai, gpt-4o)`. `#[resilient(key = (provider, model))]` builds it.
#[derive(Debug, Clone, Copy, Hash)]
pub struct KeyTuple<T>(pub T);

macro_rules! key_tuple {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Key + ?Sized),+> sealed::Sealed for KeyTuple<($(&$name,)+)> {}
        #[diagnostic::do_not_recommend]
        impl<$($name: Key + ?Sized),+> Key for KeyTuple<($(&$name,)+)> {
            fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("(")?;
                let mut first = true;
                $(
                    if !std::mem::take(&mut first) {
                        f.write_str(", ")?;
                    }
                    self.0.$index.write(f)?;
                )+
                f.write_str(")")
            }

            fn values<'k>(&'k self, visit: &mut dyn FnMut(&'k dyn KeyValue)) {
                $(self.0.$index.values(visit);)+
            }
        }
    };
}

key_tuple!(A 0, B 1);
key_tuple!(A 0, B 1, C 2);
key_tuple!(A 0, B 1, C 2, D 3);

/// A key displayed as [`Key::write`] writes it.
struct Shown<'k, K: ?Sized>(&'k K);

/// A hash of `key` by `state`: of its name as written and of its parts told apart by their
/// `Hash`, so that keys this process holds as one hash alike.
pub(crate) fn hash_key<K: Key + ?Sized>(key: &K, state: &impl std::hash::BuildHasher) -> u64 {
    struct Hashing<H>(H);
    impl<H: Hasher> Write for Hashing<H> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            self.0.write(text.as_bytes());
            Ok(())
        }
    }
    let mut hashing = Hashing(state.build_hasher());
    // Writing into a hasher cannot fail.
    let _ = write!(hashing, "{}", Shown(key));
    key.values(&mut |value| value.hash_into(&mut hashing.0));
    hashing.0.finish()
}

impl<K: Key + ?Sized> Display for Shown<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write(f)
    }
}

/// A key's name, written on the stack: the name itself up to [`MAX_KEY_BYTES`], else
/// `#{sha256 of the whole name}:{its start}` in as many bytes. No short name starts with `#`,
/// so the two forms cannot meet.
///
/// ```
/// use resil_runtime::{BreakerConfig, KeyedBreakers, MAX_KEY_BYTES};
///
/// let breakers = KeyedBreakers::new("user", BreakerConfig::default());
/// let long = "a".repeat(1 << 20);
/// let key = breakers.get(long.as_str()).key().unwrap().to_owned();
/// assert!(key.starts_with('#') && key.len() <= MAX_KEY_BYTES);
/// assert_ne!(key, breakers.get(&long[1..]).key().unwrap());
/// ```
pub(crate) struct KeyName {
    bytes: [u8; MAX_KEY_BYTES],
    len: usize,
    /// Once the name is longer than the buffer: the digest of all of it so far.
    overflow: Option<Sha256>,
}

/// `#`, 64 hex digits, `:`.
const DIGEST_PREFIX: usize = 66;

impl KeyName {
    pub(crate) fn of<K: Key + ?Sized>(key: &K) -> Self {
        let mut name = KeyName {
            bytes: [0; MAX_KEY_BYTES],
            len: 0,
            overflow: None,
        };
        // Writing into the buffer cannot fail.
        let _ = write!(name, "{}", Shown(key));
        name.finish();
        name
    }

    pub(crate) fn as_str(&self) -> &str {
        let bytes = &self.bytes[..self.len];
        // A cut inside a character keeps what precedes it.
        match std::str::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) => std::str::from_utf8(&bytes[..error.valid_up_to()]).unwrap_or_default(),
        }
    }

    /// Puts the digest in front of the name's start, for a name too long to keep whole.
    fn finish(&mut self) {
        let Some(digest) = self.overflow.take() else {
            return;
        };
        let start = MAX_KEY_BYTES - DIGEST_PREFIX;
        self.bytes.copy_within(..start, DIGEST_PREFIX);
        self.bytes[0] = b'#';
        for (i, byte) in digest.finalize().iter().enumerate() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            self.bytes[1 + 2 * i] = HEX[usize::from(byte >> 4)];
            self.bytes[2 + 2 * i] = HEX[usize::from(byte & 0xf)];
        }
        self.bytes[DIGEST_PREFIX - 1] = b':';
        self.len = MAX_KEY_BYTES;
    }
}

/// A key's name, borrowed from the key when it is a text that is its own name ([`is_plain`]),
/// else written ([`KeyName::of`]): a string key's name is then not copied through the
/// formatter, nor its buffer filled.
#[allow(
    clippy::large_enum_variant,
    reason = "a temporary on the stack: a box would allocate"
)]
pub(crate) enum Name<'k> {
    Own(&'k str),
    Written(KeyName),
}

impl<'k> Name<'k> {
    pub(crate) fn of<K: Key + ?Sized>(key: &'k K) -> Self {
        match key.text() {
            Some(text) if is_plain(text) => Name::Own(text),
            _ => Name::Written(KeyName::of(key)),
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            Name::Own(text) => text,
            Name::Written(name) => name.as_str(),
        }
    }
}

impl Write for KeyName {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        if let Some(digest) = &mut self.overflow {
            digest.update(text);
            return Ok(());
        }
        let room = MAX_KEY_BYTES - self.len;
        if text.len() <= room {
            self.bytes[self.len..self.len + text.len()].copy_from_slice(text.as_bytes());
            self.len += text.len();
            return Ok(());
        }
        let mut digest = Sha256::new();
        digest.update(&self.bytes[..self.len]);
        digest.update(text);
        self.bytes[self.len..].copy_from_slice(&text.as_bytes()[..room]);
        self.len = MAX_KEY_BYTES;
        self.overflow = Some(digest);
        Ok(())
    }
}

impl fmt::Debug for KeyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests;
