//! HTTP classification (feature `http`): which status codes are worth retrying, and how
//! long the server asked us to wait.
//!
//! 429 (too many requests), 408 (request timeout) and every 5xx (including 529, "overloaded")
//! are transient; every other 4xx, 402 among them, is permanent: asking again will not
//! change the answer. With feature `reqwest`, `reqwest::Error` is classified the same way by
//! its status, and connect errors and timeouts are transient.

use std::time::{Duration, SystemTime};

use ::http::header::RETRY_AFTER;
use ::http::{HeaderMap, StatusCode};

use crate::Transient;

/// ```
/// use http::StatusCode;
/// use resil_runtime::Transient;
///
/// assert!(StatusCode::TOO_MANY_REQUESTS.is_transient());
/// assert!(StatusCode::from_u16(529).unwrap().is_transient());
/// assert!(!StatusCode::UNAUTHORIZED.is_transient());
/// assert!(!StatusCode::PAYMENT_REQUIRED.is_transient());
/// ```
impl Transient for StatusCode {
    fn is_transient(&self) -> bool {
        *self == StatusCode::TOO_MANY_REQUESTS
            || *self == StatusCode::REQUEST_TIMEOUT
            || self.is_server_error()
    }
}

/// The wait a `Retry-After` header asks for (RFC 9110 §10.2.3): delay-seconds, or an
/// HTTP-date (a date in the past means "now", zero). Anything else is `None`, never a panic.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use std::time::Duration;
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(resil_runtime::http::retry_after(&headers), None);
/// headers.insert("retry-after", HeaderValue::from_static("120"));
/// assert_eq!(resil_runtime::http::retry_after(&headers), Some(Duration::from_secs(120)));
/// headers.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
/// assert_eq!(resil_runtime::http::retry_after(&headers), Some(Duration::ZERO));
/// ```
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    retry_after_at(headers, SystemTime::now())
}

/// [`retry_after`] as of `now`, for HTTP-dates.
pub fn retry_after_at(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Longer than u64 seconds is not a wait anyone means: treat it as garbage.
        return value.parse().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Transient when the server answered 429, 408 or 5xx, when the connection could not be
/// made or was lost (reset, closed mid-answer), or when the request timed out; permanent
/// otherwise (a 4xx, a body that does not decode, a malformed request).
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
impl Transient for reqwest::Error {
    fn is_transient(&self) -> bool {
        if let Some(status) = self.status() {
            return status.is_transient();
        }
        if self.is_timeout() || self.is_connect() {
            return true;
        }
        // A connection lost mid-answer surfaces as a body or decode error that wraps the
        // I/O error or hyper's "incomplete message".
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            if let Some(io) = error.downcast_ref::<std::io::Error>() {
                return io.is_transient();
            }
            if let Some(hyper) = error.downcast_ref::<hyper::Error>() {
                if hyper.is_incomplete_message() || hyper.is_closed() || hyper.is_canceled() {
                    return true;
                }
            }
            source = error.source();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::http::HeaderValue;

    fn headers(value: &'static [u8]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_bytes(value).unwrap());
        headers
    }

    #[test]
    fn status_codes() {
        for code in [408, 429, 500, 502, 503, 504, 529, 599] {
            assert!(StatusCode::from_u16(code).unwrap().is_transient(), "{code}");
        }
        for code in [200, 204, 301, 400, 401, 402, 403, 404, 409, 422] {
            assert!(
                !StatusCode::from_u16(code).unwrap().is_transient(),
                "{code}"
            );
        }
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(retry_after(&headers(b"0")), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(b"1")), Some(Duration::from_secs(1)));
        assert_eq!(
            retry_after(&headers(b" 30 ")),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn http_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let later = headers(b"Sun, 06 Nov 1994 08:51:37 GMT");
        assert_eq!(retry_after_at(&later, now), Some(Duration::from_secs(120)));
        let past = headers(b"Sun, 06 Nov 1994 08:40:00 GMT");
        assert_eq!(retry_after_at(&past, now), Some(Duration::ZERO));
        let obsolete_format = headers(b"Sunday, 06-Nov-94 08:51:37 GMT");
        assert_eq!(
            retry_after_at(&obsolete_format, now),
            Some(Duration::from_secs(120))
        );
    }

    #[test]
    fn garbage_is_none() {
        for garbage in [
            &b""[..],
            b"soon",
            b"-5",
            b"1.5",
            b"99999999999999999999999",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"\xff\xfe",
        ] {
            assert_eq!(retry_after(&headers(garbage)), None, "{garbage:?}");
        }
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
