//! A string key is found by its text among the entries named by their own text: keys that
//! look alike (a string and its quoted form, a numeral and an integer, a text and a type that
//! prints it, whole or a char at a time) share state exactly when they are equal values, in
//! either order, after evictions, and from several threads at once.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use resil_runtime::{Breaker, BreakerConfig, KeyTuple, KeyedBreaker, KeyedBreakers};

fn id(breaker: &KeyedBreaker) -> *const Breaker {
    &**breaker
}

fn fresh(max_keys: usize) -> KeyedBreakers {
    KeyedBreakers::new("k", BreakerConfig::default()).with_max_keys(max_keys)
}

/// Prints its text whole: told apart from the string by its type.
#[derive(Clone, Hash, PartialEq, Eq)]
struct Shows(&'static str);

impl fmt::Display for Shows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Prints its text a char at a time: the name is read in many pieces.
#[derive(Clone, Hash, PartialEq, Eq)]
struct Chunked(&'static str);

impl fmt::Display for Chunked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0
            .chars()
            .try_for_each(|c| fmt::Write::write_char(f, c))
    }
}

type Getter = Box<dyn Fn(&KeyedBreakers) -> KeyedBreaker + Send + Sync>;

/// Keys, each with the label of its value: equal labels, equal values.
fn look_alikes() -> Vec<(String, Getter)> {
    let mut keys: Vec<(String, Getter)> = Vec::new();
    let texts = [
        "42",
        "\"42\"",
        "true",
        "\"true\"",
        "false",
        "-",
        "\"-\"",
        "-1",
        "\"-1\"",
        "1e3",
        "",
        "\"\"",
        "\\\"\\\"",
        "a b",
        "\"a b\"",
        "x",
        "\"x\"",
        "\\\"x\\\"",
        "(a, b)",
        "(a, \"b\")",
        "٣",
        "42\0",
        "\u{7f}",
        "a\u{200b}",
        "e\u{301}",
        "é",
        "True",
        "+1",
        "--1",
        "-0",
        "0",
        "#x",
        "k=v",
        "🦀",
    ];
    for text in texts {
        let label = format!("text {text:?}");
        keys.push((label.clone(), Box::new(move |r| r.get(text))));
        keys.push((label.clone(), Box::new(move |r| r.get(&text.to_owned()))));
        keys.push((
            label.clone(),
            Box::new(move |r| r.get(&Arc::<str>::from(text))),
        ));
        let cow = move |r: &KeyedBreakers| r.get(&Cow::<'static, str>::Borrowed(text));
        keys.push((label.clone(), Box::new(cow)));
        let mut chars = text.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            keys.push((label, Box::new(move |r| r.get(&c))));
        }
        keys.push((
            format!("Shows {text:?}"),
            Box::new(move |r| r.get(&Shows(text))),
        ));
        keys.push((
            format!("Chunked {text:?}"),
            Box::new(move |r| r.get(&Chunked(text))),
        ));
    }
    keys.push(("int 42".into(), Box::new(|r| r.get(&42u8))));
    keys.push(("int 42".into(), Box::new(|r| r.get(&42i128))));
    keys.push(("int -1".into(), Box::new(|r| r.get(&-1i32))));
    keys.push(("int 0".into(), Box::new(|r| r.get(&0usize))));
    keys.push(("bool true".into(), Box::new(|r| r.get(&true))));
    keys.push(("bool false".into(), Box::new(|r| r.get(&false))));
    keys.push(("(a, b)".into(), Box::new(|r| r.get(&KeyTuple(("a", "b"))))));
    keys.push((
        "(a, \"b\")".into(),
        Box::new(|r| r.get(&KeyTuple(("a", "\"b\"")))),
    ));
    keys.push((
        "(x, 42)".into(),
        Box::new(|r| r.get(&KeyTuple(("x", &42u32)))),
    ));
    keys.push((
        "(x, \"42\")".into(),
        Box::new(|r| r.get(&KeyTuple(("x", "42")))),
    ));
    keys
}

/// Keys `i` and `j` of `keys`, fetched as `a` and `b`, hold one entry exactly when their values
/// are equal (their labels are).
fn one_entry_when_equal(
    keys: &[(String, Getter)],
    (i, a): (usize, &KeyedBreaker),
    (j, b): (usize, &KeyedBreaker),
    at: &str,
) {
    let (first, second) = (&keys[i].0, &keys[j].0);
    assert_eq!(id(a) == id(b), first == second, "{at}{first} then {second}");
}

/// Every ordered pair, in a fresh registry: one entry exactly when the values are equal.
#[test]
fn look_alikes_share_only_with_equal_values_in_either_order() {
    let keys = look_alikes();
    for (i, (_, first)) in keys.iter().enumerate() {
        for (j, (_, second)) in keys.iter().enumerate() {
            if i != j {
                let registry = fresh(1000);
                let (a, b) = (first(&registry), second(&registry));
                one_entry_when_equal(&keys, (i, &a), (j, &b), "");
            }
        }
    }
    let registry = fresh(1000);
    for (text, name) in [
        ("gpt-4o", "gpt-4o"),
        ("42", "\"42\""),
        ("-", "-"),
        ("", "\"\""),
        ("a b", "\"a b\""),
        ("\"a b\"", "\"\\\"a b\\\"\""),
        ("a\u{200b}", "\"a\u{200b}\""),
    ] {
        assert_eq!(registry.get(text).key(), Some(name), "{text:?}");
        let chunked = Chunked(Box::leak(text.to_owned().into_boxed_str()));
        assert_eq!(
            registry.get(&chunked).key(),
            Some(name),
            "printed in pieces: {text:?}"
        );
    }
}

/// Draws the look-alikes with a xorshift: what two lookups fetch, round after round.
fn pairs(mut seed: u64, count: usize) -> impl Iterator<Item = (usize, usize)> {
    std::iter::repeat_with(move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (
            (seed % count as u64) as usize,
            ((seed >> 32) % count as u64) as usize,
        )
    })
}

/// With room for 5 keys and new ones coming all the time, equal values still share one entry
/// while held, and unequal ones never do.
#[test]
fn after_evictions_equal_values_share_and_unequal_ones_never_do() {
    let keys = look_alikes();
    let registry = fresh(5);
    for (round, (i, j)) in pairs(0x2545_F491_4F6C_DD1D, keys.len())
        .take(20_000)
        .enumerate()
    {
        let a = (keys[i].1)(&registry);
        if round % 3 == 0 {
            let _ = registry.get(format!("churn{}", round % 50).as_str());
            let _ = registry.get(format!("churn {}", round % 47).as_str());
        }
        let b = (keys[j].1)(&registry);
        one_entry_when_equal(&keys, (i, &a), (j, &b), &format!("round {round}: "));
    }
}

/// Four threads on 4 places, the same colliding keys: never shared, never split.
#[test]
fn lookups_from_several_threads_never_share_and_never_split() {
    let keys = Arc::new(look_alikes());
    let registry = Arc::new(fresh(4));
    let threads: Vec<_> = (1..=4u64)
        .map(|thread| {
            let (keys, registry) = (Arc::clone(&keys), Arc::clone(&registry));
            std::thread::spawn(move || {
                for (i, j) in pairs(0x9E37_79B9_7F4A_7C15 ^ thread, keys.len()).take(50_000) {
                    let (a, b) = ((keys[i].1)(&registry), (keys[j].1)(&registry));
                    one_entry_when_equal(&keys, (i, &a), (j, &b), "");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}
