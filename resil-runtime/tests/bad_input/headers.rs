//! Whatever a server puts in `Retry-After`: a wait or `None`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use resil_runtime::http::retry_after_at;

fn parse(value: &[u8], now: SystemTime) -> Option<Duration> {
    let mut headers = HeaderMap::new();
    headers.insert("retry-after", HeaderValue::from_bytes(value).ok()?);
    retry_after_at(&headers, now)
}

proptest! {
    #![proptest_config(crate::common::proptest_config(1024, "bad_input.proptest-regressions"))]

    /// Garbage, huge numbers, any bytes a header may carry: a wait or `None`.
    #[test]
    fn any_header_value_is_a_wait_or_none(value in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse(&value, SystemTime::now());
    }

    #[test]
    fn delay_seconds_of_any_length(digits in "[0-9]{1,40}") {
        let parsed = parse(digits.as_bytes(), SystemTime::now());
        match digits.parse::<u64>() {
            Ok(secs) => prop_assert_eq!(parsed, Some(Duration::from_secs(secs))),
            Err(_) => prop_assert_eq!(parsed, None),
        }
    }

    /// Dates from 1970 to 9999, against a clock anywhere in that range: the future is a
    /// wait, the past is zero.
    #[test]
    fn http_dates_far_past_and_far_future(date in 0u64..253_402_300_799, now in 0u64..253_402_300_799) {
        let date = UNIX_EPOCH + Duration::from_secs(date);
        let now = UNIX_EPOCH + Duration::from_secs(now);
        let text = httpdate::fmt_http_date(date);
        let expected = date.duration_since(now).unwrap_or(Duration::ZERO);
        prop_assert_eq!(parse(text.as_bytes(), now), Some(expected));
    }
}
