//! Feature `chaos`: fault injection for tests of code that uses resil: failures at a chosen
//! rate, added latency, stalls and cut streams, drawn from a seeded generator, so a test run
//! replays the same faults in the same order (and, under tokio's paused clock, at the same
//! instants).
//!
//! ```
//! use resil_runtime::chaos::Chaos;
//! use std::time::Duration;
//!
//! #[derive(Debug, PartialEq)]
//! struct Unavailable;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let chaos = Chaos::seeded(7)
//!     .fail(0.3, || Unavailable)
//!     .latency(Duration::from_millis(20)..Duration::from_millis(80));
//! let mut failed = 0;
//! for _ in 0..100 {
//!     let answer = chaos.inject(async { Ok::<_, Unavailable>(42) }).await;
//!     failed += u32::from(answer.is_err());
//! }
//! assert!((20..40).contains(&failed), "about 30 % of calls: {failed}");
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::sync::lock_std;

/// What to inject, and the seeded generator that decides when (see the [module docs](self)).
/// Share one by reference: every call draws from the same sequence.
pub struct Chaos<E> {
    rng: Mutex<SmallRng>,
    failure: Option<(f64, Box<dyn Fn() -> E + Send + Sync>)>,
    latency: Option<Range<Duration>>,
    stall: f64,
    cut: f64,
}

impl<E> fmt::Debug for Chaos<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chaos")
            .field("failure_rate", &self.failure.as_ref().map(|(rate, _)| rate))
            .field("latency", &self.latency)
            .field("stall_rate", &self.stall)
            .field("cut_rate", &self.cut)
            .finish()
    }
}

/// A rate as a probability: out of range or not a number, clamped to 0..=1.
fn rate(rate: f64) -> f64 {
    if rate.is_nan() {
        0.0
    } else {
        rate.clamp(0.0, 1.0)
    }
}

impl<E> Chaos<E> {
    /// No fault yet, drawing from a generator seeded with `seed`.
    pub fn seeded(seed: u64) -> Self {
        Chaos {
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            failure: None,
            latency: None,
            stall: 0.0,
            cut: 0.0,
        }
    }

    /// A `share` (0.0 to 1.0) of calls fails with `error()` instead of being made.
    pub fn fail(mut self, share: f64, error: impl Fn() -> E + Send + Sync + 'static) -> Self {
        self.failure = Some((rate(share), Box::new(error)));
        self
    }

    /// Every call waits a time drawn from `range` first (an empty range: its start).
    pub fn latency(mut self, range: Range<Duration>) -> Self {
        self.latency = Some(range);
        self
    }

    /// A `share` of calls never answers (until the caller's timeout cuts it).
    pub fn stall(mut self, share: f64) -> Self {
        self.stall = rate(share);
        self
    }

    /// A `share` of streams ([`Chaos::inject_stream`]) ends early, after an item drawn
    /// from their first few.
    pub fn cut(mut self, share: f64) -> Self {
        self.cut = rate(share);
        self
    }

    fn draw<T>(&self, draw: impl FnOnce(&mut SmallRng) -> T) -> T {
        draw(&mut lock_std(&self.rng))
    }

    /// Runs `call` with the faults: the latency first, then a stall, a failure, or the call.
    pub async fn inject<T, F>(&self, call: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        self.apply(self.faults(), Some(call)).await
    }

    /// Draws the faults of one call.
    fn faults(&self) -> Faults {
        self.draw(|rng| Faults {
            wait: self.latency.as_ref().map(|range| {
                if range.start >= range.end {
                    range.start
                } else {
                    rng.random_range(range.clone())
                }
            }),
            stall: rng.random_bool(self.stall),
            fail: (self.failure.as_ref()).is_some_and(|(rate, _)| rng.random_bool(*rate)),
        })
    }

    /// The call with its `faults`; `call` may be `None` only when they stall or fail it.
    async fn apply<T, F>(&self, faults: Faults, call: Option<F>) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some(wait) = faults.wait {
            tokio::time::sleep(wait).await;
        }
        if let (false, true, Some((_, error))) = (faults.stall, faults.fail, &self.failure) {
            return Err(error());
        }
        match call {
            Some(call) if !faults.stall => call.await,
            _ => std::future::pending().await,
        }
    }

    /// `stream` with the faults of [`Chaos::cut`]: a stream chosen to be cut ends after one of
    /// its first five items, as a provider hanging up mid-answer does.
    pub fn inject_stream<S: Stream>(&self, stream: S) -> Cut<S> {
        let left = self.draw(|rng| rng.random_bool(self.cut).then(|| rng.random_range(1..=5)));
        Cut { stream, left }
    }
}

/// What one call gets: a latency, and a stall or a failure instead of the call.
#[derive(Debug, Clone, Copy)]
struct Faults {
    wait: Option<Duration>,
    stall: bool,
    fail: bool,
}

#[cfg(feature = "tower")]
impl Faults {
    /// Whether the call is made at all: the tower layer makes no call it fails or stalls.
    fn calls(&self) -> bool {
        !self.stall && !self.fail
    }
}

/// A stream that may end early: see [`Chaos::inject_stream`].
#[derive(Debug)]
pub struct Cut<S> {
    stream: S,
    /// Items still let through, for a stream that is cut.
    left: Option<u32>,
}

impl<S: Stream + Unpin> Stream for Cut<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        if self.left == Some(0) {
            return Poll::Ready(None);
        }
        let next = Pin::new(&mut self.stream).poll_next(cx);
        if let (Poll::Ready(Some(_)), Some(left)) = (&next, &mut self.left) {
            *left -= 1;
        }
        next
    }
}

/// The faults of a [`Chaos`] in front of a tower service (features `chaos` and `tower`): each
/// call gets the latency, maybe a stall, maybe the chosen error instead of the service's
/// answer (the inner call's future is then dropped unpolled).
///
/// ```
/// use resil_runtime::chaos::{Chaos, ChaosLayer};
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let service = ServiceBuilder::new()
///     .layer(ChaosLayer::new(Chaos::seeded(1).fail(1.0, || "injected")))
///     .service(service_fn(|n: u32| async move { Ok::<_, &str>(n) }));
/// assert_eq!(service.oneshot(1).await, Err("injected"));
/// # }
/// ```
#[cfg(feature = "tower")]
pub use layer::{ChaosLayer, ChaosService};

#[cfg(feature = "tower")]
mod layer {
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use tower::{Layer, Service};

    use super::Chaos;
    use crate::tower::BoxFuture;

    /// See [`Chaos`] and the re-export's docs.
    #[derive(Debug)]
    pub struct ChaosLayer<E> {
        chaos: Arc<Chaos<E>>,
    }

    impl<E> Clone for ChaosLayer<E> {
        fn clone(&self) -> Self {
            ChaosLayer {
                chaos: Arc::clone(&self.chaos),
            }
        }
    }

    impl<E> ChaosLayer<E> {
        /// A layer injecting `chaos`'s faults.
        pub fn new(chaos: Chaos<E>) -> Self {
            ChaosLayer {
                chaos: Arc::new(chaos),
            }
        }
    }

    impl<S, E> Layer<S> for ChaosLayer<E> {
        type Service = ChaosService<S, E>;

        fn layer(&self, inner: S) -> Self::Service {
            ChaosService {
                inner,
                chaos: Arc::clone(&self.chaos),
            }
        }
    }

    /// The service a [`ChaosLayer`] makes.
    #[derive(Debug)]
    pub struct ChaosService<S, E> {
        inner: S,
        chaos: Arc<Chaos<E>>,
    }

    impl<S: Clone, E> Clone for ChaosService<S, E> {
        fn clone(&self) -> Self {
            ChaosService {
                inner: self.inner.clone(),
                chaos: Arc::clone(&self.chaos),
            }
        }
    }

    impl<S, Req, E> Service<Req> for ChaosService<S, E>
    where
        S: Service<Req, Error = E>,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        E: Send + 'static,
    {
        type Response = S::Response;
        type Error = E;
        type Future = BoxFuture<S::Response, E>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), E>> {
            self.inner.poll_ready(cx)
        }

        /// The inner service is called only when the faults let the call through, as
        /// [`Chaos::fail`] and [`Chaos::stall`] promise.
        fn call(&mut self, request: Req) -> Self::Future {
            let chaos = Arc::clone(&self.chaos);
            let faults = chaos.faults();
            let call = faults.calls().then(|| self.inner.call(request));
            Box::pin(async move { chaos.apply(faults, call).await })
        }
    }
}

/// The faults of a [`Chaos`] in front of a `reqwest_middleware` client's requests (features
/// `chaos` and `reqwest-middleware`): each request gets the latency, maybe a stall, maybe the
/// chosen error instead of being sent. Put it after a `PolicyMiddleware` to test the policy.
///
/// ```
/// use resil_runtime::chaos::{Chaos, ChaosMiddleware};
///
/// let chaos = Chaos::seeded(3).fail(0.2, || {
///     reqwest_middleware::Error::middleware(std::io::Error::other("injected"))
/// });
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(ChaosMiddleware::new(chaos))
///     .build();
/// # let _ = client;
/// ```
#[cfg(feature = "reqwest-middleware")]
#[derive(Debug)]
pub struct ChaosMiddleware {
    chaos: Chaos<reqwest_middleware::Error>,
}

#[cfg(feature = "reqwest-middleware")]
impl ChaosMiddleware {
    /// A middleware injecting `chaos`'s faults.
    pub fn new(chaos: Chaos<reqwest_middleware::Error>) -> Self {
        ChaosMiddleware { chaos }
    }
}

#[cfg(feature = "reqwest-middleware")]
#[async_trait::async_trait]
impl reqwest_middleware::Middleware for ChaosMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.chaos.inject(next.run(request, extensions)).await
    }
}
