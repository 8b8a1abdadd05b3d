//! HTTP classification (feature `http`): which status codes are worth retrying, and how
//! long the server asked us to wait.
//!
//! 429 (too many requests), 408 (request timeout) and the 5xx (including 529, "overloaded")
//! are transient, except those that say the server cannot serve the request at all (501,
//! 505, 506, 508, 510, 511); every other 4xx, 402 among them, is permanent: asking again will
//! not change the answer. A 429 is a throttle: retried after its wait, never counted toward
//! opening a breaker. With feature `reqwest`, [`classify`] turns a response into `Ok` or an
//! [`HttpError`] that keeps the status, the wait and the body; `reqwest::Error` is classified
//! by its status, and connect errors and timeouts are transient. [`rate_limits`] reads what
//! a provider's headers say of its rate limits (OpenAI's, Anthropic's, the IETF draft's).

use std::time::{Duration, SystemTime};

use ::http::header::RETRY_AFTER;
use ::http::HeaderMap;

/// The `http` crate's status code, which is `Transient` (re-exported so a derive can use
/// `#[transient(by = status)]` on it without another dependency).
pub use ::http::StatusCode;

use crate::Transient;

mod limits;
pub use limits::{rate_limits, rate_limits_at, RESET_MAX};

/// The 5xx that say the server cannot serve this request at all, however often it is asked:
/// 501 Not Implemented, 505 HTTP Version Not Supported, 506 Variant Also Negotiates,
/// 508 Loop Detected, 510 Not Extended, 511 Network Authentication Required.
const PERMANENT_5XX: [u16; 6] = [501, 505, 506, 508, 510, 511];

/// ```
/// use http::StatusCode;
/// use resil_runtime::Transient;
///
/// assert!(StatusCode::TOO_MANY_REQUESTS.is_transient());
/// assert!(!StatusCode::NOT_IMPLEMENTED.is_transient());
/// assert!(StatusCode::from_u16(529).unwrap().is_transient());
/// assert!(!StatusCode::UNAUTHORIZED.is_transient());
/// assert!(!StatusCode::PAYMENT_REQUIRED.is_transient());
/// ```
impl Transient for StatusCode {
    fn is_transient(&self) -> bool {
        *self == StatusCode::TOO_MANY_REQUESTS
            || *self == StatusCode::REQUEST_TIMEOUT
            || (self.is_server_error() && !PERMANENT_5XX.contains(&self.as_u16()))
    }

    fn is_throttle(&self) -> bool {
        *self == StatusCode::TOO_MANY_REQUESTS
    }
}

/// The wait a response asks for: `retry-after-ms` (milliseconds, sent by OpenAI and Azure)
/// when present, else `Retry-After` (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date (a
/// date in the past means "now", zero). Anything else is `None`, never a panic.
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
    let digits = |value: &str| -> Option<u64> {
        // Longer than u64 units is not a wait anyone means: treat it as garbage.
        (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse().ok())
            .flatten()
    };
    let millis = headers
        .get("retry-after-ms")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| digits(value.trim()));
    if let Some(millis) = millis {
        return Some(Duration::from_millis(millis));
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Some(seconds) = digits(value) {
        return Some(Duration::from_secs(seconds));
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Transient when the server answered 429, 408 or 5xx, when the connection could not be
/// made or was lost (reset, closed mid-answer), or when the request timed out; permanent
/// otherwise (a 4xx, a body that does not decode, a malformed request).
///
/// **A `reqwest::Error` has no headers**, so it cannot honour `Retry-After`: a client written
/// `.send().await?.error_for_status()?` retries a 429 after its own backoff (milliseconds),
/// not after the wait the server asked for, and collects another 429. Use [`classify`]
/// instead of `error_for_status`: its [`HttpError`] keeps the wait.
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
impl Transient for reqwest::Error {
    fn is_throttle(&self) -> bool {
        self.status().is_some_and(|status| status.is_throttle())
    }

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

/// A response that was not a success, classified: what [`classify`] returns.
///
/// Transient for 429, 408 and 5xx, with the wait the response asked for; a 429 is a throttle.
/// A 429 whose body says the quota is exhausted (`insufficient_quota`) is permanent: no wait
/// will refill it. The message holds the start of the body, for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// The status.
    pub status: StatusCode,
    /// The wait the response asked for (`retry-after-ms` or `Retry-After`).
    pub retry_after: Option<Duration>,
    /// The start of the body (at most [`HttpError::BODY_LIMIT`] bytes), as text.
    pub body: String,
}

impl HttpError {
    /// The most of a body kept for the message: enough for a provider's error JSON, not a
    /// hostile body's gigabytes.
    pub const BODY_LIMIT: usize = 4096;

    /// The longest an error's body is waited for; what arrived by then is kept.
    pub const BODY_WAIT: Duration = Duration::from_secs(1);

    /// An answer with `status`, its `headers` and the start of its `body`, classified: the
    /// wait its headers ask for, and at most [`HttpError::BODY_LIMIT`] bytes of the body.
    #[cfg(feature = "reqwest")]
    pub(crate) fn from_parts(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Self {
        HttpError {
            status,
            retry_after: retry_after(headers),
            body: String::from_utf8_lossy(&body[..body.len().min(Self::BODY_LIMIT)]).into_owned(),
        }
    }

    /// Does the body say the account's quota is used up (OpenAI's `insufficient_quota`)?
    pub fn quota_exhausted(&self) -> bool {
        self.status == StatusCode::TOO_MANY_REQUESTS && self.body.contains("insufficient_quota")
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server answered {}", self.status)?;
        let body = self.body.trim();
        if !body.is_empty() {
            write!(f, ": {body}")?;
        }
        Ok(())
    }
}

impl std::error::Error for HttpError {}

impl Transient for HttpError {
    fn is_transient(&self) -> bool {
        self.status.is_transient() && !self.quota_exhausted()
    }

    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    fn is_throttle(&self) -> bool {
        self.status.is_throttle() && !self.quota_exhausted()
    }
}

/// The response if it is a success (2xx), else an [`HttpError`] with its status, its wait and
/// the start of its body. Use it where you would call `error_for_status()`, which drops the
/// headers and with them the `Retry-After`. Whatever the status, the rate-limit headers
/// ([`rate_limits`]) go to the current call, whose gates declared `rate = "auto"` learn from
/// them ([`crate::operation::report_limits`]).
///
/// ```no_run
/// # #[derive(Debug, thiserror::Error)]
/// # enum LlmError {
/// #     #[error(transparent)] Http(#[from] resil_runtime::http::HttpError),
/// #     #[error(transparent)] Transport(#[from] reqwest::Error),
/// # }
/// # async fn call(client: reqwest::Client) -> Result<String, LlmError> {
/// let response = client.post("http://127.0.0.1:8080/v1/chat/completions").send().await?;
/// let response = resil_runtime::http::classify(response).await?;
/// Ok(response.text().await?)
/// # }
/// ```
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub async fn classify(mut response: reqwest::Response) -> Result<reqwest::Response, HttpError> {
    crate::operation::report_limits(rate_limits(response.headers()));
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let body = body_start(&mut response).await;
    Err(HttpError::from_parts(status, &headers, &body))
}

/// The first [`HttpError::BODY_LIMIT`] bytes of an error's body, or what arrived of them
/// within [`HttpError::BODY_WAIT`]: neither an endless body nor one that stalls holds the
/// caller. A body cut short (or never sent) still leaves a classified error.
#[cfg(feature = "reqwest")]
pub(crate) async fn body_start(response: &mut reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    let read = async {
        while body.len() < HttpError::BODY_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
    };
    let _ = tokio::time::timeout(HttpError::BODY_WAIT, read).await;
    body.truncate(HttpError::BODY_LIMIT);
    body
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
        for code in [408, 429, 500, 502, 503, 504, 507, 529, 599] {
            assert!(StatusCode::from_u16(code).unwrap().is_transient(), "{code}");
        }
        for code in [
            200, 204, 301, 400, 401, 402, 403, 404, 409, 422, 501, 505, 506, 508, 510, 511,
        ] {
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
    fn retry_after_ms_comes_first() {
        let mut both = headers(b"2");
        both.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&both), Some(Duration::from_millis(1500)));
        let mut garbage_ms = headers(b"2");
        garbage_ms.insert("retry-after-ms", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&garbage_ms), Some(Duration::from_secs(2)));
    }

    #[test]
    fn a_429_is_a_throttle_unless_the_quota_is_gone() {
        let error = |body: &str| HttpError {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(Duration::from_secs(1)),
            body: body.to_owned(),
        };
        let throttled = error(r#"{"error":{"code":"rate_limit_exceeded"}}"#);
        assert!(throttled.is_transient() && throttled.is_throttle());
        let exhausted = error(r#"{"error":{"code":"insufficient_quota"}}"#);
        assert!(!exhausted.is_transient() && !exhausted.is_throttle());
        let unavailable = HttpError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            ..error("")
        };
        assert!(unavailable.is_transient() && !unavailable.is_throttle());
        assert_eq!(
            unavailable.to_string(),
            "the server answered 503 Service Unavailable"
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
