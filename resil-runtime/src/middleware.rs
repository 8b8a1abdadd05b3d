//! Feature `reqwest-middleware`: a policy for every request of a
//! [`reqwest_middleware::ClientWithMiddleware`], for SDKs built on it.
//!
//! Each request runs as one operation of the policy. The middleware classifies answers itself,
//! as [`crate::http::classify`] does: 429 (with its `Retry-After` or `retry-after-ms`), 408,
//! 529 and the 5xx that a retry can fix are retried after their wait, a 429 whose body says the quota is exhausted is
//! not, other statuses are final. When no retry is left the caller gets the last response as
//! the server sent it (a 503 is a response, not an error); transport failures and resil's own
//! rejections are errors.
//!
//! A request's turn, for a policy that orders its waiters (`by_priority`, `fair`), is the
//! [`Order`] in its extensions (`RequestBuilder::with_extension(Order::new(Priority::Batch)
//! .fair(&tenant))`), or a bare [`Priority`] there; none: `Default`, one
//! `fair` turn.
//!
//! Only requests whose body can be cloned go through the policy: a streaming body cannot be
//! sent twice, so such a request is sent as it is, once. With [`PolicyMiddleware::idempotency_key`], every
//! attempt carries the operation's id in that header, the same on each retry, so a server
//! that honours it does not act twice. Events, tracing and metrics report the middleware's
//! operations like any other.
//!
//! ```
//! use resil_runtime::middleware::PolicyMiddleware;
//! use resil_runtime::Policy;
//! use std::time::Duration;
//!
//! let policy = Policy::builder().timeout(Duration::from_secs(20)).retry(2).build().unwrap();
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(PolicyMiddleware::new(policy).idempotency_key("Idempotency-Key"))
//!     .build();
//! # let _ = client;
//! ```

use std::sync::Arc;
use std::time::Duration;

use http::{Extensions, HeaderName, HeaderValue, StatusCode};
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::http::{body_start, HttpError};
use crate::{Next as Step, Operation, Order, Policy, Priority, Rejected, Transient};

/// Applies a [`Policy`] to every request (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct PolicyMiddleware {
    policy: Arc<Policy>,
    idempotency_key: Option<HeaderName>,
}

impl PolicyMiddleware {
    /// A middleware applying `policy`.
    pub fn new(policy: Policy) -> Self {
        Self::shared(Arc::new(policy))
    }

    /// A middleware applying a policy shared with other call sites.
    pub fn shared(policy: Arc<Policy>) -> Self {
        PolicyMiddleware {
            policy,
            idempotency_key: None,
        }
    }

    /// Sends the operation's id in the header `name` on every attempt (`Idempotency-Key` is
    /// the usual one). A name that is not a valid header name is ignored: no header is sent.
    pub fn idempotency_key(mut self, name: &str) -> Self {
        self.idempotency_key = HeaderName::try_from(name).ok();
        self
    }
}

/// How an attempt failed, as the policy sees it.
#[derive(Debug)]
enum Failure {
    /// The server answered with an error status: the response, kept for the caller.
    Status {
        response: Response,
        class: HttpError,
    },
    Transport(reqwest_middleware::Error),
    Rejected(Rejected),
}

impl From<Rejected> for Failure {
    fn from(rejected: Rejected) -> Self {
        Failure::Rejected(rejected)
    }
}

impl Transient for Failure {
    fn is_transient(&self) -> bool {
        match self {
            Failure::Status { class, .. } => class.is_transient(),
            Failure::Transport(reqwest_middleware::Error::Reqwest(error)) => error.is_transient(),
            Failure::Transport(_) => false,
            Failure::Rejected(rejected) => rejected.is_transient(),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::Status { class, .. } => class.retry_after,
            Failure::Rejected(rejected) => rejected.retry_after(),
            Failure::Transport(_) => None,
        }
    }

    fn is_throttle(&self) -> bool {
        matches!(self, Failure::Status { class, .. } if class.is_throttle())
    }
}

/// The response, or the failure its status stands for. Only a 429's body is read (to tell a
/// throttle from an exhausted quota), at most its first [`HttpError::BODY_LIMIT`] bytes and
/// for at most [`HttpError::BODY_WAIT`]; the response is then rebuilt from its parts with
/// what was read, so its `url()` is no longer the request's.
async fn classified(mut response: Response) -> Result<Response, Failure> {
    crate::operation::report_limits(crate::http::rate_limits(response.headers()));
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status != StatusCode::TOO_MANY_REQUESTS {
        let class = HttpError::from_parts(status, response.headers(), &[]);
        return Err(Failure::Status { response, class });
    }
    let (version, mut headers) = (response.version(), response.headers().clone());
    let body = body_start(&mut response).await;
    let class = HttpError::from_parts(status, &headers, &body);
    headers.remove(http::header::TRANSFER_ENCODING);
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut rebuilt = http::Response::new(body);
    *rebuilt.status_mut() = status;
    *rebuilt.version_mut() = version;
    *rebuilt.headers_mut() = headers;
    Err(Failure::Status {
        response: Response::from(rebuilt),
        class,
    })
}

#[async_trait::async_trait]
impl Middleware for PolicyMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        // A body that cannot be cloned cannot be sent twice: such a request goes through as
        // it is, once, outside the policy.
        if request.try_clone().is_none() {
            return next.run(request, extensions).await;
        }
        let mut execution = self.policy.execute::<Failure>();
        match (extensions.get::<Order>(), extensions.get::<Priority>()) {
            (Some(order), _) => execution.set_order(*order),
            (None, Some(priority)) => execution.set_priority(*priority),
            (None, None) => {}
        }
        let outcome = loop {
            let attempt = request.try_clone();
            let header = self.idempotency_key.clone();
            let next = next.clone();
            let extensions = &mut *extensions;
            let call = async move {
                // Cloned once above, so it clones again; were it not, the attempt makes no call.
                let Some(mut attempt) = attempt else {
                    return Err(Failure::Rejected(Rejected::Incomplete));
                };
                if let (Some(header), Some(operation)) = (header, Operation::current()) {
                    if let Ok(id) = HeaderValue::try_from(operation.id().to_string()) {
                        attempt.headers_mut().insert(header, id);
                    }
                }
                let response = next
                    .run(attempt, extensions)
                    .await
                    .map_err(Failure::Transport)?;
                classified(response).await
            };
            if let Step::Done(outcome) = execution.attempt(call).await {
                break outcome;
            }
        };
        match outcome.into_result() {
            Ok(response) | Err(Failure::Status { response, .. }) => Ok(response),
            Err(Failure::Transport(error)) => Err(error),
            Err(Failure::Rejected(rejected)) => {
                Err(reqwest_middleware::Error::middleware(rejected))
            }
        }
    }
}
