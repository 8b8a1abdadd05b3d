//! Feature `tower`: a [`Policy`] as a [`tower::Layer`], for clients and servers built on tower.
//!
//! Every request runs as one operation of the policy: each attempt takes a fresh clone of the
//! inner service, waits for it to be ready and calls it with a clone of the request, under
//! the policy's timeout, retries, breaker, bulkhead and gates. So the request must be `Clone`,
//! and the inner service's error must say what is worth retrying ([`Transient`]) and carry
//! resil's own failures (`From<Rejected>`).
//!
//! **Readiness.** The service is always ready: the bulkhead sheds load at the call, with
//! [`Rejected::BulkheadFull`], rather than holding callers back in `poll_ready` (a permit taken
//! in `poll_ready` would be held by a caller that may never call). Put tower's
//! `ConcurrencyLimitLayer` in front for backpressure instead; the inner service's own readiness
//! is awaited in each attempt, within the attempt's timeout.
//!
//! ```
//! use resil_runtime::tower::PolicyLayer;
//! use resil_runtime::{Policy, Rejected, Transient};
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//!
//! #[derive(Debug)]
//! enum Error { Busy, Rejected(Rejected) }
//! impl Transient for Error {
//!     fn is_transient(&self) -> bool { !matches!(self, Error::Rejected(r) if !r.is_transient()) }
//! }
//! impl From<Rejected> for Error {
//!     fn from(r: Rejected) -> Self { Error::Rejected(r) }
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
//! let counted = calls.clone();
//! let service = ServiceBuilder::new()
//!     .layer(PolicyLayer::new(Policy::builder().retry(2).build().unwrap()))
//!     .service(service_fn(move |n: u32| {
//!         let call = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!         async move { if call < 2 { Err(Error::Busy) } else { Ok(n * 2) } }
//!     }));
//! assert_eq!(service.oneshot(21).await.unwrap(), 42);
//! assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 3);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt};

use crate::key::Key;
use crate::policy::Keyed;
use crate::{Order, Policy, Rejected, Transient};

/// A boxed, `Send` future: what a policy's service returns.
pub type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

/// Applies a [`Policy`] to every request of the service it wraps (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct PolicyLayer<O = InArrival> {
    policy: Arc<Policy>,
    order: O,
}

impl PolicyLayer {
    /// A layer applying `policy`.
    pub fn new(policy: Policy) -> Self {
        Self::shared(Arc::new(policy))
    }

    /// A layer applying a policy shared with other layers or call sites (its breaker,
    /// bulkhead and gates count every request through any of them).
    pub fn shared(policy: Arc<Policy>) -> Self {
        PolicyLayer {
            policy,
            order: InArrival,
        }
    }

    /// Each request's turn, for a policy that orders its waiters
    /// ([`PolicyBuilder::by_priority`](crate::PolicyBuilder::by_priority),
    /// [`PolicyBuilder::fair`](crate::PolicyBuilder::fair)): `order` reads its class and its
    /// `fair` value from the request (an `http::Request`'s extensions or headers, say).
    ///
    /// ```
    /// use resil_runtime::tower::PolicyLayer;
    /// use resil_runtime::{Order, Policy, Priority};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .rate(10, Duration::from_secs(1), 1)
    ///     .by_priority()
    ///     .fair()
    ///     .build()
    ///     .unwrap();
    /// // Requests are (tenant, interactive) pairs here.
    /// let layer = PolicyLayer::new(policy).ordered_by(|request: &(String, bool)| {
    ///     let class = if request.1 { Priority::Critical } else { Priority::Batch };
    ///     Order::new(class).fair(&request.0)
    /// });
    /// # let _ = layer;
    /// ```
    pub fn ordered_by<F>(self, order: F) -> PolicyLayer<ByRequest<F>> {
        PolicyLayer {
            policy: self.policy,
            order: ByRequest(order),
        }
    }
}

impl<S, O: Clone> Layer<S> for PolicyLayer<O> {
    type Service = PolicyService<S, O>;

    fn layer(&self, inner: S) -> PolicyService<S, O> {
        PolicyService {
            inner,
            policy: Arc::clone(&self.policy),
            order: self.order.clone(),
        }
    }
}

/// How a [`PolicyService`] finds each request's [`Order`] (see [`PolicyLayer::ordered_by`]).
pub trait Orders<Req> {
    /// The turn of `request`.
    fn order(&self, request: &Req) -> Order;
}

/// Every request in one class and one `fair` turn: served in arrival order.
#[derive(Debug, Clone, Copy, Default)]
pub struct InArrival;

impl<Req> Orders<Req> for InArrival {
    fn order(&self, _: &Req) -> Order {
        Order::default()
    }
}

/// Each request's turn as a function reads it (see [`PolicyLayer::ordered_by`]).
#[derive(Clone)]
pub struct ByRequest<F>(F);

impl<Req, F: Fn(&Req) -> Order> Orders<Req> for ByRequest<F> {
    fn order(&self, request: &Req) -> Order {
        (self.0)(request)
    }
}

impl<F> std::fmt::Debug for ByRequest<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByRequest").finish_non_exhaustive()
    }
}

/// The service a [`PolicyLayer`] makes.
#[derive(Debug, Clone)]
pub struct PolicyService<S, O = InArrival> {
    inner: S,
    policy: Arc<Policy>,
    order: O,
}

impl<S, O, Req> Service<Req> for PolicyService<S, O>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Transient + From<Rejected> + Send + 'static,
    Req: Clone + Send + 'static,
    O: Orders<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let (policy, inner) = (Arc::clone(&self.policy), self.inner.clone());
        let order = self.order.order(&request);
        Box::pin(async move {
            let mut execution = policy.execute();
            execution.set_order(order);
            execution.run(attempts(inner, request)).await
        })
    }
}

/// The attempts of one request: each a fresh clone of the service, ready, called with a clone
/// of the request. The closure owns both, so the operation is `Send` without either being
/// `Sync`.
fn attempts<S, Req>(inner: S, request: Req) -> impl FnMut() -> tower::util::Oneshot<S, Req>
where
    S: Service<Req> + Clone,
    Req: Clone,
{
    move || inner.clone().oneshot(request.clone())
}

/// Applies a keyed [`Policy`] (a breaker, bulkhead or gates per key) to every request, keyed
/// by what `key` reads from the request: per host, per model, per tenant.
///
/// ```
/// use resil_runtime::tower::KeyedPolicyLayer;
/// use resil_runtime::Policy;
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .breaker_per_key("host", 5, Duration::from_secs(30))
///     .build()
///     .unwrap();
/// let layer = KeyedPolicyLayer::new(policy, |request: &(String, u32)| request.0.clone());
/// # let _ = layer;
/// ```
pub struct KeyedPolicyLayer<F, O = InArrival> {
    policy: Arc<Policy<Keyed>>,
    key: F,
    order: O,
}

impl<F: Clone, O: Clone> Clone for KeyedPolicyLayer<F, O> {
    fn clone(&self) -> Self {
        KeyedPolicyLayer {
            policy: Arc::clone(&self.policy),
            key: self.key.clone(),
            order: self.order.clone(),
        }
    }
}

impl<F, O> std::fmt::Debug for KeyedPolicyLayer<F, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedPolicyLayer")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<F> KeyedPolicyLayer<F> {
    /// A layer applying `policy`, each request under the key `key` reads from it.
    pub fn new(policy: Policy<Keyed>, key: F) -> Self {
        KeyedPolicyLayer {
            policy: Arc::new(policy),
            key,
            order: InArrival,
        }
    }

    /// Each request's turn, for a policy that orders its waiters: as
    /// [`PolicyLayer::ordered_by`], within each key's gates and bulkhead queue (and those
    /// shared by the keys).
    ///
    /// ```
    /// use resil_runtime::tower::KeyedPolicyLayer;
    /// use resil_runtime::{Order, Policy, Priority};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .rate(10, Duration::from_secs(1), 1)
    ///     .by_priority()
    ///     .keyed("model")
    ///     .rate_per_key()
    ///     .build()
    ///     .unwrap();
    /// // Requests are (model, interactive) pairs here.
    /// let layer = KeyedPolicyLayer::new(policy, |request: &(String, bool)| request.0.clone())
    ///     .ordered_by(|request: &(String, bool)| {
    ///         Order::new(if request.1 { Priority::Critical } else { Priority::Batch })
    ///     });
    /// # let _ = layer;
    /// ```
    pub fn ordered_by<G>(self, order: G) -> KeyedPolicyLayer<F, ByRequest<G>> {
        KeyedPolicyLayer {
            policy: self.policy,
            key: self.key,
            order: ByRequest(order),
        }
    }
}

impl<S, F: Clone, O: Clone> Layer<S> for KeyedPolicyLayer<F, O> {
    type Service = KeyedPolicyService<S, F, O>;

    fn layer(&self, inner: S) -> Self::Service {
        KeyedPolicyService {
            inner,
            policy: Arc::clone(&self.policy),
            key: self.key.clone(),
            order: self.order.clone(),
        }
    }
}

/// The service a [`KeyedPolicyLayer`] makes.
pub struct KeyedPolicyService<S, F, O = InArrival> {
    inner: S,
    policy: Arc<Policy<Keyed>>,
    key: F,
    order: O,
}

impl<S: Clone, F: Clone, O: Clone> Clone for KeyedPolicyService<S, F, O> {
    fn clone(&self) -> Self {
        KeyedPolicyService {
            inner: self.inner.clone(),
            policy: Arc::clone(&self.policy),
            key: self.key.clone(),
            order: self.order.clone(),
        }
    }
}

impl<S: std::fmt::Debug, F, O> std::fmt::Debug for KeyedPolicyService<S, F, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedPolicyService")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<S, F, O, K, Req> Service<Req> for KeyedPolicyService<S, F, O>
where
    S: Service<Req> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Transient + From<Rejected> + Send + 'static,
    Req: Clone + Send + 'static,
    F: Fn(&Req) -> K,
    K: Key + Send + Sync + 'static,
    O: Orders<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let (key, order) = ((self.key)(&request), self.order.order(&request));
        let (policy, inner) = (Arc::clone(&self.policy), self.inner.clone());
        Box::pin(async move {
            let mut execution = policy.execute_keyed(&key);
            execution.set_order(order);
            execution.run(attempts(inner, request)).await
        })
    }
}
