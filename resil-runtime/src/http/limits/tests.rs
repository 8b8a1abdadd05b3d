use super::*;
use ::http::{HeaderName, HeaderValue};
use proptest::prelude::*;
use std::time::UNIX_EPOCH;

mod ietf;

fn headers(fields: &[(&'static str, &[u8])]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in fields {
        // Names as providers spell them (`RateLimit-Policy`): HeaderMap lowercases them.
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        headers.append(name, HeaderValue::from_bytes(value).unwrap());
    }
    headers
}

/// 2024-08-21T16:20:45Z, fifteen seconds before the Anthropic samples' reset.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_724_257_245)
}

fn secs(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn millis(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[test]
fn openai_sample() {
    let limits = rate_limits_at(
        &headers(&[
            ("x-ratelimit-limit-requests", b"10000"),
            ("x-ratelimit-remaining-requests", b"9999"),
            ("x-ratelimit-reset-requests", b"6ms"),
            ("x-ratelimit-limit-tokens", b"30000000"),
            ("x-ratelimit-remaining-tokens", b"29999000"),
            ("x-ratelimit-reset-tokens", b"2ms"),
        ]),
        now(),
    );
    let quota = |limit, remaining, reset| Quota {
        limit: Some(limit),
        remaining,
        reset,
        window: None,
    };
    assert_eq!(limits.requests, Some(quota(10_000, 9_999, millis(6))));
    assert_eq!(
        limits.tokens,
        Some(quota(30_000_000, 29_999_000, millis(2)))
    );
}

#[test]
fn counts() {
    assert_eq!(count("0"), Some(0));
    assert_eq!(count("18446744073709551615"), Some(u64::MAX));
    for text in [
        "",
        "-1",
        "+1",
        "1e5",
        "1.0",
        "1 0",
        "0x10",
        "99999999999999999999999",
    ] {
        assert_eq!(count(text), None, "{text:?}");
    }
}

#[test]
fn anthropic_sample() {
    let limits = rate_limits_at(
        &headers(&[
            ("anthropic-ratelimit-requests-limit", b"50"),
            ("anthropic-ratelimit-requests-remaining", b"49"),
            (
                "anthropic-ratelimit-requests-reset",
                b"2024-08-21T16:20:46Z",
            ),
            ("anthropic-ratelimit-tokens-limit", b"80000"),
            ("anthropic-ratelimit-tokens-remaining", b"79000"),
            ("anthropic-ratelimit-tokens-reset", b"2024-08-21T16:21:00Z"),
            ("anthropic-ratelimit-input-tokens-limit", b"40000"),
            ("anthropic-ratelimit-input-tokens-remaining", b"100"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                b"2024-08-21T16:21:00Z",
            ),
        ]),
        now(),
    );
    let requests = limits.requests.unwrap();
    assert_eq!((requests.limit, requests.remaining), (Some(50), 49));
    assert_eq!(requests.reset, secs(1));
    // The `tokens` family wins over input and output, even with fewer left there.
    let tokens = limits.tokens.unwrap();
    assert_eq!((tokens.limit, tokens.remaining), (Some(80_000), 79_000));
    assert_eq!(tokens.reset, secs(15));
}

#[test]
fn anthropic_input_and_output_tokens_the_tighter() {
    let fields = [
        ("anthropic-ratelimit-input-tokens-limit", b"40000" as &[u8]),
        ("anthropic-ratelimit-input-tokens-remaining", b"39000"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            b"2024-08-21T16:21:00.250Z",
        ),
        ("anthropic-ratelimit-output-tokens-limit", b"8000"),
        ("anthropic-ratelimit-output-tokens-remaining", b"7000"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            b"2024-08-21T18:20:47+02:00",
        ),
    ];
    let tokens = rate_limits_at(&headers(&fields), now()).tokens.unwrap();
    assert_eq!(
        (tokens.limit, tokens.remaining, tokens.reset),
        (Some(8000), 7000, secs(2))
    );
    // Either alone is the tokens quota.
    let tokens = rate_limits_at(&headers(&fields[..3]), now())
        .tokens
        .unwrap();
    assert_eq!((tokens.remaining, tokens.reset), (39_000, millis(15_250)));
}

#[test]
fn anthropic_resets_past_and_far() {
    let reset = |instant: &'static [u8]| {
        let fields = [
            ("anthropic-ratelimit-requests-remaining", b"1" as &[u8]),
            ("anthropic-ratelimit-requests-reset", instant),
        ];
        rate_limits_at(&headers(&fields), now())
            .requests
            .map(|quota| quota.reset)
    };
    assert_eq!(reset(b"2024-08-21T16:20:00Z"), Some(Duration::ZERO));
    assert_eq!(reset(b"1970-01-01T00:00:00Z"), Some(Duration::ZERO));
    assert_eq!(reset(b"2031-01-01T00:00:00Z"), Some(RESET_MAX));
    assert_eq!(reset(b"9999-12-31T23:59:59Z"), Some(RESET_MAX));
    assert_eq!(reset(b"2024-13-01T00:00:00Z"), None);
    assert_eq!(reset(b"2024-02-30T00:00:00Z"), None);
    assert_eq!(reset(b"30"), None);
}

#[test]
fn precedence() {
    let openai = [
        ("x-ratelimit-remaining-requests", b"1" as &[u8]),
        ("x-ratelimit-reset-requests", b"1s"),
    ];
    let anthropic = [
        ("anthropic-ratelimit-requests-remaining", b"2" as &[u8]),
        (
            "anthropic-ratelimit-requests-reset",
            b"2024-08-21T16:20:47Z",
        ),
    ];
    let structured = [("ratelimit", br#""default";r=3;t=3"# as &[u8])];
    let separate = [
        ("ratelimit-remaining", b"4" as &[u8]),
        ("ratelimit-reset", b"4"),
    ];
    let remaining = |fields: &[&[(&'static str, &[u8])]]| {
        let fields: Vec<_> = fields.concat();
        rate_limits_at(&headers(&fields), now())
            .requests
            .map(|quota| quota.remaining)
    };
    assert_eq!(
        remaining(&[&separate, &structured, &anthropic, &openai]),
        Some(1)
    );
    assert_eq!(remaining(&[&separate, &structured, &anthropic]), Some(2));
    assert_eq!(remaining(&[&separate, &structured]), Some(3));
    assert_eq!(remaining(&[&separate]), Some(4));
    assert_eq!(remaining(&[]), None);
}

#[test]
fn hostile_values_drop_the_quota() {
    let quota = |limit: Option<&'static [u8]>, remaining: &'static [u8], reset: &'static [u8]| {
        let mut fields = vec![
            ("x-ratelimit-remaining-requests", remaining),
            ("x-ratelimit-reset-requests", reset),
        ];
        fields.extend(limit.map(|limit| ("x-ratelimit-limit-requests", limit)));
        rate_limits_at(&headers(&fields), now()).requests
    };
    for remaining in [
        &b""[..],
        b"-1",
        b"1e5",
        b"99999999999999999999999",
        b"1 0",
        b"\xc3\x28",
        b"\xff",
    ] {
        assert_eq!(quota(None, remaining, b"1s"), None, "{remaining:?}");
    }
    for reset in [&b""[..], b"5m-3s", b"1.2.3s", b"1x", b"s", b"-1s", b"\xb5s"] {
        assert_eq!(quota(None, b"1", reset), None, "{reset:?}");
    }
    // A limit present and malformed drops the quota; absent, it is only unknown.
    assert_eq!(quota(Some(b"ten"), b"1", b"1s"), None);
    assert_eq!(quota(Some(b"\xff"), b"1", b"1s"), None);
    assert_eq!(
        quota(None, b" 7 ", b" 1s ").map(|quota| quota.remaining),
        Some(7)
    );
    // Clamps: remaining to the limit, the reset to RESET_MAX; a limit of 0 is kept.
    let clamped = quota(Some(b"10"), b"500", b"9999999999h").unwrap();
    assert_eq!(
        (clamped.limit, clamped.remaining, clamped.reset),
        (Some(10), 10, RESET_MAX)
    );
    let closed = quota(Some(b"0"), b"3", b"1s").unwrap();
    assert_eq!((closed.limit, closed.remaining), (Some(0), 0));
}

/// Every header name read, for the property below.
const NAMES: [&str; 23] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
];

/// Values near each grammar (digits, units, dates, structured fields) as well as any bytes a
/// header may carry.
fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[0-9]{0,25}".prop_map(String::into_bytes),
        "[0-9.]{0,12}(ns|us|µs|ms|s|m|h|x|-)?([0-9.]{0,12}(ns|µs|s|m|h))?"
            .prop_map(String::into_bytes),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})?"
            .prop_map(String::into_bytes),
        "(\"[a-z\\\\\",;]{0,6}\"|[a-z]{1,4})?(;[a-zRt*]{0,2}(=[-0-9.\"?]{0,22})?){0,4}(, ?)?"
            .prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

proptest! {
    #[test]
    fn any_values_never_panic_and_resets_stay_bounded(
        fields in proptest::collection::vec((0..NAMES.len(), value()), 0..12),
        now_secs in any::<u32>(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            // Bytes no header may carry (controls, newlines) never reach a parser.
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                headers.append(NAMES[name], value);
            }
        }
        let limits = rate_limits_at(&headers, UNIX_EPOCH + Duration::from_secs(now_secs.into()));
        for quota in [limits.requests, limits.tokens].into_iter().flatten() {
            prop_assert!(quota.reset <= RESET_MAX);
            prop_assert!(quota.limit.is_none_or(|limit| quota.remaining <= limit));
        }
    }
}

/// A field repeated with values that disagree is read where it allows the least: read as its
/// first line, "remaining 100" then "remaining 0" let calls go that the provider refuses.
#[test]
fn repeated_fields_that_disagree_are_read_at_their_tightest() {
    /// Two lines of one field.
    type Lines = [&'static [u8]; 2];
    let orders: [(Lines, Lines); 2] = [
        ([b"100", b"0"], [b"1s", b"30s"]),
        ([b"0", b"100"], [b"30s", b"1s"]),
    ];
    for (remaining, reset) in orders {
        let limits = rate_limits_at(
            &headers(&[
                ("x-ratelimit-limit-requests", b"500"),
                ("x-ratelimit-limit-requests", b"200"),
                ("x-ratelimit-remaining-requests", remaining[0]),
                ("x-ratelimit-remaining-requests", remaining[1]),
                ("x-ratelimit-reset-requests", reset[0]),
                ("x-ratelimit-reset-requests", reset[1]),
            ]),
            now(),
        );
        let requests = limits.requests.unwrap();
        assert_eq!(
            (requests.limit, requests.remaining, requests.reset),
            (Some(200), 0, secs(30))
        );
    }
    // The same folded into one line by a proxy.
    let folded = [
        ("x-ratelimit-remaining-requests", b"100, 0" as &[u8]),
        ("x-ratelimit-reset-requests", b"1s,30s"),
    ];
    let requests = rate_limits_at(&headers(&folded), now()).requests.unwrap();
    assert_eq!((requests.remaining, requests.reset), (0, secs(30)));
    // One line of the field malformed: the answer is not to be trusted, as with one line.
    let fields = [
        ("RateLimit-Remaining", b"5" as &[u8]),
        ("RateLimit-Remaining", b"-1"),
        ("RateLimit-Reset", b"3"),
    ];
    assert_eq!(rate_limits_at(&headers(&fields), now()).requests, None);
}
