//! The key's names and the two reads of a string: whole, and streamed.

use super::*;

fn name<K: Key + ?Sized>(key: &K) -> String {
    KeyName::of(key).as_str().to_owned()
}

/// The key's name when a lookup finds it by the key's text alone.
fn plain<K: Key + ?Sized>(key: &K) -> Option<&str> {
    key.text().filter(|text| is_plain(text))
}

/// The lookup's shortcut names a key exactly as writing its name would, or stands aside.
#[test]
fn a_plain_key_is_named_by_its_text_only_when_writing_it_gives_the_same() {
    let long = "a".repeat(MAX_KEY_BYTES + 1);
    let texts = [
        "gpt-4o",
        "claude-3.5",
        "",
        "-",
        "-1",
        "42",
        "1e3",
        "true",
        "false",
        "truex",
        "a b",
        "a,b",
        "\"q\"",
        "é",
        "模型",
        "a\nb",
        "x}",
        "a=b",
        "user@host",
        &long,
    ];
    for text in texts {
        let named = |plain: Option<&str>, written: String| {
            if let Some(plain) = plain {
                assert_eq!(plain, written, "{text:?}");
            }
            plain.is_some()
        };
        let by_str = named(plain(text), name(text));
        assert_eq!(
            named(plain(&String::from(text)), name(&String::from(text))),
            by_str
        );
        assert_eq!(
            named(
                plain(&Arc::<str>::from(text)),
                name(&Arc::<str>::from(text))
            ),
            by_str
        );
        assert_eq!(by_str, !text.is_empty() && name(text) == text, "{text:?}");
    }
    assert_eq!(plain(&42u32), None, "only strings take the shortcut");
}

/// What the streamed read finds of `pieces`, written one after another.
fn look(pieces: &[&str]) -> bool {
    let mut look = Look::default();
    for piece in pieces {
        let _ = look.write_str(piece);
    }
    look.plain()
}

/// `text` cut at every char boundary, as a `Display` writing a char at a time gives it.
fn chars(text: &str) -> Vec<&str> {
    let cuts: Vec<usize> = (0..=text.len())
        .filter(|&at| text.is_char_boundary(at))
        .collect();
    cuts.windows(2).map(|cut| &text[cut[0]..cut[1]]).collect()
}

proptest::proptest! {
    /// The whole-text check and the streamed one are one rule up to the length limit,
    /// whether the streamed one reads the text whole or in pieces.
    #[test]
    fn both_reads_of_a_string_agree(
        text in "(-?[0-9]{0,3}|true|false|[\\PC\\p{Cc}\\p{Mn}\\p{Nd}\\p{No}\\u{80}-\\u{ff}A-Za-z\" ,=}{-]{0,8})",
    ) {
        proptest::prop_assert_eq!(is_plain(&text), look(&[&text]), "{:?}", text);
        proptest::prop_assert_eq!(is_plain(&text), look(&chars(&text)), "{:?} in pieces", text);
    }
}

/// Every char, alone and beside a letter, a digit or a minus: the two reads agree.
#[test]
fn both_reads_agree_on_every_char() {
    for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
        for text in [
            c.to_string(),
            format!("a{c}"),
            format!("{c}a"),
            format!("-{c}"),
            format!("1{c}"),
        ] {
            assert_eq!(is_plain(&text), look(&[&text]), "{text:?}");
            assert_eq!(is_plain(&text), look(&chars(&text)), "{text:?} in pieces");
        }
    }
}

/// Past the limit only the whole-text check says no: a name that long is cut to its
/// digest whatever the streamed read found, so the two still name alike.
#[test]
fn past_the_limit_no_text_is_plain() {
    let long = "a".repeat(MAX_KEY_BYTES + 1);
    assert!(!is_plain(&long));
    assert!(is_plain(&long[1..]));
    assert!(name(long.as_str()).starts_with('#'));
}

#[test]
fn plain_keys_keep_their_look() {
    assert_eq!(name("gpt-4o"), "gpt-4o");
    assert_eq!(name(&String::from("claude-3.5")), "claude-3.5");
    assert_eq!(name(&42u32), "42");
    assert_eq!(name(&KeyTuple(("openai", "gpt-4o"))), "(openai, gpt-4o)");
}

#[test]
fn keys_that_print_alike_get_distinct_names() {
    assert_ne!(
        name(&KeyTuple(("openai, gpt-4o", "mini"))),
        name(&KeyTuple(("openai", "gpt-4o, mini")))
    );
    assert_ne!(name(&42u32), name("42"));
    assert_ne!(name(&true), name("true"));
    assert_ne!(name(""), name("\"\""));
    assert_eq!(name(&42u32), name(&42i64), "integers are compared by value");
    assert_eq!(name("gpt"), name(&String::from("gpt")));
    assert_eq!(name("x"), name(&'x'));
}

#[test]
fn a_cut_name_is_bounded_and_keeps_its_start() {
    let long = "é".repeat(1000);
    let cut = name(long.as_str());
    assert!(cut.len() <= MAX_KEY_BYTES, "{}", cut.len());
    assert!(cut.starts_with('#'));
    assert!(cut[DIGEST_PREFIX..].starts_with("éé"), "{cut}");
    assert_ne!(cut, name(&"é".repeat(1001)));
    assert_eq!(cut, name(long.as_str()));
}
