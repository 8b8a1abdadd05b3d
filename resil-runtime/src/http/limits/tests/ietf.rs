//! The IETF draft's fields: structured and separate, hostile, of another unit, huge.

use super::super::ietf::MAX_LIST_BYTES;
use super::*;

#[test]
fn ietf_structured_fields() {
    let limits = rate_limits_at(
        &headers(&[
            ("ratelimit-policy", br#""default";q=100;w=10"#),
            ("ratelimit", br#""default";r=50;t=30"#),
        ]),
        now(),
    );
    let expected = Quota {
        limit: Some(100),
        remaining: 50,
        reset: secs(30),
        window: Some(secs(10)),
    };
    assert_eq!(limits.requests, Some(expected));
    assert_eq!(limits.tokens, None);

    // Several policies, over two lines: the one with fewest remaining.
    let limits = rate_limits_at(
        &headers(&[
            (
                "RateLimit-Policy",
                br#""burst";q=100;w=60, "daily";q=1000;w=86400"#,
            ),
            ("RateLimit", br#""burst";r=90;t=20"#),
            ("RateLimit", br#""daily";r=5;t=7200, "other";r=9"#),
        ]),
        now(),
    );
    let expected = Quota {
        limit: Some(1000),
        remaining: 5,
        reset: secs(7200),
        window: Some(secs(86_400)),
    };
    assert_eq!(limits.requests, Some(expected));

    // A policy not described: no limit nor window. A token names it as well as a string.
    let requests = rate_limits_at(&headers(&[("ratelimit", b"default;r=0;t=1")]), now()).requests;
    let expected = Quota {
        limit: None,
        remaining: 0,
        reset: secs(1),
        window: None,
    };
    assert_eq!(requests, Some(expected));
}

#[test]
fn ietf_separate_fields() {
    let limits = rate_limits_at(
        &headers(&[
            ("RateLimit-Limit", b"100"),
            ("RateLimit-Remaining", b"50"),
            ("RateLimit-Reset", b"30"),
        ]),
        now(),
    );
    let expected = Quota {
        limit: Some(100),
        remaining: 50,
        reset: secs(30),
        window: None,
    };
    assert_eq!(limits.requests, Some(expected));
    let far = [
        ("RateLimit-Remaining", b"1" as &[u8]),
        ("RateLimit-Reset", b"99999999999999999999999"),
    ];
    assert_eq!(
        rate_limits_at(&headers(&far), now())
            .requests
            .unwrap()
            .reset,
        RESET_MAX
    );
}

#[test]
fn ietf_hostile() {
    for value in [
        br#""default";r=-1;t=30"# as &[u8],
        br#""default";r=1.5;t=30"#,
        br#""default";r="5";t=30"#,
        br#""default";r=5;t=30,"#,
        br#""default" ;r=5;t=30"#,
        br#""default";R=5;t=30"#,
        br#""default;r=5;t=30"#,
        br#""default";r=5"#,
        br#""default";r=99999999999999999999999;t=30"#,
        b"",
        b",",
        b"\xff",
    ] {
        let requests = rate_limits_at(&headers(&[("ratelimit", value)]), now()).requests;
        assert_eq!(requests, None, "{}", String::from_utf8_lossy(value));
    }
    // A malformed policy drops the quota rather than leave it without its limit.
    let fields = [
        ("ratelimit-policy", br#""default";q=-100"# as &[u8]),
        ("ratelimit", br#""default";r=5;t=3"#),
    ];
    assert_eq!(rate_limits_at(&headers(&fields), now()).requests, None);
}

/// The IETF quota unit: a policy counting content bytes (or concurrent requests) is no
/// request quota, and the member of a requests policy is read beside it.
#[test]
fn an_ietf_policy_of_another_unit_is_no_request_quota() {
    let bytes = [
        (
            "RateLimit-Policy",
            br#""bytes";q=1000000;w=60;qu="content-bytes""# as &[u8],
        ),
        ("RateLimit", br#""bytes";r=10;t=60"#),
    ];
    assert_eq!(rate_limits_at(&headers(&bytes), now()).requests, None);
    let both = [
        (
            "RateLimit-Policy",
            br#""bytes";q=1000000;w=60;qu="content-bytes", "calls";q=100;w=60;qu="requests""#
                as &[u8],
        ),
        ("RateLimit", br#""bytes";r=10;t=60, "calls";r=40;t=20"#),
    ];
    let requests = rate_limits_at(&headers(&both), now()).requests.unwrap();
    assert_eq!(
        (requests.limit, requests.remaining, requests.reset),
        (Some(100), 40, secs(20))
    );
}

/// Hundreds of kilobytes of `RateLimit` fields (each member matched against each policy,
/// 213 KB and 157 KB took 1.7 s on every answer) are not read: a real field is a few dozen
/// bytes. A field at the bound is read with a lookup per member.
#[test]
fn huge_ratelimit_fields_are_not_read() {
    let members: Vec<String> = (0..20_000).map(|i| format!("\"p{i}\";r=5;t=30")).collect();
    let policies: Vec<String> = (0..20_000).map(|i| format!("\"p{i}\";q=9;w=60")).collect();
    let (ratelimit, policy) = (members.join(", "), policies.join(", "));
    let fields = [
        ("ratelimit", ratelimit.as_bytes()),
        ("ratelimit-policy", policy.as_bytes()),
    ];
    assert_eq!(rate_limits_at(&headers(&fields), now()).requests, None);
    let fit = |list: &[String]| {
        let mut joined = String::new();
        for item in list {
            if joined.len() + item.len() + 2 > MAX_LIST_BYTES {
                break;
            }
            if !joined.is_empty() {
                joined.push_str(", ");
            }
            joined.push_str(item);
        }
        joined
    };
    let (ratelimit, policy) = (fit(&members), fit(&policies));
    let fields = [
        ("ratelimit", ratelimit.as_bytes()),
        ("ratelimit-policy", policy.as_bytes()),
    ];
    let requests = rate_limits_at(&headers(&fields), now()).requests.unwrap();
    assert_eq!((requests.limit, requests.remaining), (Some(9), 5));
}
