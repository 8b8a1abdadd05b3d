//! [`Listener`]: who hears a policy's events; where the listeners of every policy and of
//! policies by name are kept, and how a policy finds the one it emits to.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock, RwLock};

use super::event::Event;
use crate::sync::{read_std, write_std};

/// Receives [`Event`]s. Keep it fast: it runs inline on the calling task.
///
/// ```
/// use resil_runtime::events::{Event, Listener};
/// use resil_runtime::Policy;
/// use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
///
/// #[derive(Debug, Default)]
/// struct CountAttempts(AtomicU32);
///
/// impl Listener for CountAttempts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::AttemptStarted { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let counter = Arc::new(CountAttempts::default());
/// let policy = Policy::builder().listener(counter.clone()).build().unwrap();
/// let _: Result<(), resil_runtime::Rejected> = policy.run(|| async { Ok(()) }).await;
/// assert_eq!(counter.0.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub trait Listener: Send + Sync + fmt::Debug + 'static {
    /// Called for every event.
    fn on_event(&self, event: &Event<'_>);
}

/// A listener kept in a `static`, as `#[resilient(listener = AUDIT)]` names one.
impl<L: Listener + ?Sized> Listener for &'static L {
    fn on_event(&self, event: &Event<'_>) {
        (**self).on_event(event);
    }
}

/// The listeners registered for every policy, and for policies by name. Each list is swapped
/// whole on registration, so sending an event clones one `Arc` and holds no lock while the
/// listeners run (a listener may register another).
#[derive(Debug, Default)]
struct Hub {
    all: RwLock<Listeners>,
    by_site: RwLock<HashMap<String, Listeners>>,
}

type Listeners = Arc<[Arc<dyn Listener>]>;

impl Listener for Hub {
    fn on_event(&self, event: &Event<'_>) {
        let all = Arc::clone(&read_std(&self.all));
        for listener in all.iter() {
            listener.on_event(event);
        }
        let Some(site) = event.site() else {
            return;
        };
        let mine = read_std(&self.by_site).get(site).cloned();
        for listener in mine.iter().flat_map(|listeners| listeners.iter()) {
            listener.on_event(event);
        }
    }
}

static HUB: OnceLock<Arc<Hub>> = OnceLock::new();
/// The hub as the listener policies send to: set at the first registration, so until then
/// emitting an event costs one atomic load.
static GLOBAL: OnceLock<Arc<dyn Listener>> = OnceLock::new();

fn hub() -> &'static Hub {
    let hub = HUB.get_or_init(Arc::default);
    GLOBAL.get_or_init(|| Arc::clone(hub) as Arc<dyn Listener>);
    hub
}

/// Adds a listener for every policy's events (every `#[resilient]` function's too), beside
/// the others and each policy's own.
///
/// ```
/// use resil_runtime::events::{self, Event, Listener};
/// use std::sync::Arc;
///
/// #[derive(Debug)]
/// struct Log;
///
/// impl Listener for Log {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::BreakerTransition { breaker, transition } = event {
///             eprintln!("{breaker}: {} -> {}", transition.from, transition.to);
///         }
///     }
/// }
///
/// events::add_global_listener(Arc::new(Log));
/// ```
pub fn add_global_listener(listener: Arc<dyn Listener>) {
    let hub = hub();
    let mut all = write_std(&hub.all);
    *all = all.iter().cloned().chain([listener]).collect();
}

/// Adds a listener for the events of the policy named `site` (for a `#[resilient]`
/// function, its path: `my_crate::billing::charge`), whenever it is called: the events that
/// carry a site (attempts, waits, rejections, give-ups). Breaker transitions go to the global
/// listeners and to the policy's own (`#[resilient(listener = …)]`).
///
/// ```
/// use resil_runtime::events::{self, Event, Listener};
/// use resil_runtime::Policy;
/// use std::sync::{atomic::{AtomicU32, Ordering}, Arc};
///
/// #[derive(Debug, Default)]
/// struct Attempts(AtomicU32);
///
/// impl Listener for Attempts {
///     fn on_event(&self, event: &Event<'_>) {
///         if let Event::AttemptStarted { .. } = event {
///             self.0.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let attempts = Arc::new(Attempts::default());
/// events::add_listener_for("billing::charge", attempts.clone());
/// let charge = Policy::builder().name("billing::charge").build().unwrap();
/// let other = Policy::builder().name("billing::refund").build().unwrap();
/// let _: Result<(), resil_runtime::Rejected> = charge.run(|| async { Ok(()) }).await;
/// let _: Result<(), resil_runtime::Rejected> = other.run(|| async { Ok(()) }).await;
/// assert_eq!(attempts.0.load(Ordering::Relaxed), 1);
/// # }
/// ```
pub fn add_listener_for(site: &str, listener: Arc<dyn Listener>) {
    let hub = hub();
    let mut by_site = write_std(&hub.by_site);
    let mine = by_site
        .entry(site.to_owned())
        .or_insert_with(|| Arc::new([]));
    *mine = mine.iter().cloned().chain([listener]).collect();
}

/// A policy's own listener, then the global ones.
#[derive(Debug)]
pub(crate) struct Both(pub(crate) Arc<dyn Listener>);

impl Listener for Both {
    fn on_event(&self, event: &Event<'_>) {
        self.0.on_event(event);
        if let Some(global) = GLOBAL.get() {
            global.on_event(event);
        }
    }
}

/// The listener a policy emits to: its own (which passes events on to the global ones), or
/// else the global ones.
#[inline]
pub(crate) fn resolve(own: Option<&Arc<dyn Listener>>) -> Option<&Arc<dyn Listener>> {
    own.or_else(|| GLOBAL.get())
}
