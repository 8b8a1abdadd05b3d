//! What passes between a store and this instance's breakers and gates: an [`Announcement`] of
//! a transition made here, and the handles ([`BreakerNews`], [`GateNews`]) through which a
//! store delivers what other instances did. A handle can only tell what happened elsewhere:
//! the breaker or gate decides what it makes of it (a peer's cooldown is cut to its own, an
//! operator's override outranks the peers).

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::links::{BreakerLink, GateLink, Linked, Pending};
use crate::breaker_state::BreakerState;

/// A transition of a shared breaker, as a store records it.
///
/// ```
/// use resil_runtime::shared::Change;
/// use std::time::Duration;
///
/// fn ttl(change: Change) -> Option<Duration> {
///     match change {
///         Change::Opened(left) => Some(left),
///         _ => None,
///     }
/// }
/// assert_eq!(ttl(Change::Closed), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The breaker opened, for this long still (what is left of its cooldown).
    Opened(Duration),
    /// The breaker closed: its probe succeeded.
    Closed,
}

impl Change {
    /// What `breaker` reaching `to` tells the store: nothing for half-open (a local step), or
    /// for an opening with nothing left of its cooldown.
    pub(crate) fn of(breaker: &dyn Linked, to: BreakerState) -> Option<Self> {
        match to {
            BreakerState::Open => {
                let left = breaker.cooldown_left();
                (!left.is_zero()).then_some(Change::Opened(left))
            }
            BreakerState::Closed => Some(Change::Closed),
            BreakerState::HalfOpen => None,
        }
    }

    fn pending(self) -> u64 {
        match self {
            Change::Opened(_) => Pending::OPENED,
            Change::Closed => Pending::CLOSED,
        }
    }
}

/// A transition a breaker of this instance made by its own calls, for the store to record and
/// deliver to the other instances ([`SharedStore::announce`](super::SharedStore::announce)).
/// Until [`published`](Self::published), the breaker counts it as untold, and a re-sync tells
/// it again ([`BreakerNews::untold`]).
///
/// ```
/// use resil_runtime::shared::{Announcement, Change};
///
/// fn record(announcement: Announcement) {
///     let what = match announcement.change() {
///         Change::Opened(left) => format!("{} open for {left:?}", announcement.breaker()),
///         _ => format!("{} closed", announcement.breaker()),
///     };
///     println!("{what}");
///     announcement.published();
/// }
/// ```
pub struct Announcement {
    breaker: Arc<str>,
    change: Change,
    timeout: Duration,
    pending: Arc<Pending>,
    announced: u64,
}

impl fmt::Debug for Announcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Announcement")
            .field("breaker", &self.breaker)
            .field("change", &self.change)
            .finish_non_exhaustive()
    }
}

impl Announcement {
    /// Records `change` of the breaker `link` as untold until published.
    pub(crate) fn new(link: &BreakerLink, change: Change) -> Self {
        let announced = link.pending.announce(change.pending());
        Self::told(link, change, announced)
    }

    fn told(link: &BreakerLink, change: Change, announced: u64) -> Self {
        Announcement {
            breaker: Arc::clone(&link.id),
            change,
            timeout: link.sharing.timeout,
            pending: Arc::clone(&link.pending),
            announced,
        }
    }

    /// The breaker's name in the store (as [`BreakerLink::name`]).
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// What the breaker did.
    pub fn change(&self) -> Change {
        self.change
    }

    /// How long resil would wait for the store (the policy's `shared_timeout`): the bound of
    /// the write.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The store recorded it and told the other instances: the breaker no longer counts it as
    /// untold (unless it announced a newer one meanwhile, which stays untold).
    pub fn published(self) {
        self.pending.published(self.announced);
    }
}

/// A shared breaker of this instance, as a store holds it to deliver what other instances
/// did ([`SharedStore::listen_breaker`](super::SharedStore::listen_breaker)). It holds the
/// breaker weakly: clone it freely, and drop it once [`is_gone`](Self::is_gone).
///
/// ```
/// use resil_runtime::shared::BreakerNews;
/// use std::time::Duration;
///
/// /// A peer's message, as a store receives it: `open <ms> <name>` or `closed <name>`.
/// fn deliver(listed: &[BreakerNews], message: &str) {
///     let mut words = message.split(' ');
///     match (words.next(), words.next(), words.next()) {
///         (Some("open"), Some(ms), Some(name)) => {
///             let left = Duration::from_millis(ms.parse().unwrap_or(0));
///             for breaker in listed.iter().filter(|b| b.name() == name) {
///                 breaker.opened_elsewhere(left);
///             }
///         }
///         (Some("closed"), Some(name), None) => {
///             for breaker in listed.iter().filter(|b| b.name() == name) {
///                 breaker.closed_elsewhere();
///             }
///         }
///         _ => {}
///     }
/// }
/// ```
#[derive(Clone)]
pub struct BreakerNews {
    name: Arc<str>,
    breaker: Weak<dyn Linked>,
}

impl fmt::Debug for BreakerNews {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerNews")
            .field("name", &self.name)
            .field("gone", &self.is_gone())
            .finish()
    }
}

impl BreakerNews {
    pub(crate) fn new(name: Arc<str>, breaker: Weak<dyn Linked>) -> Self {
        BreakerNews { name, breaker }
    }

    /// The breaker's name in the store (as [`BreakerLink::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared rather than copied by what lists the handle.
    #[cfg(feature = "redis")]
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// Whether the breaker is gone (its policies dropped): the handle may be forgotten.
    pub fn is_gone(&self) -> bool {
        self.breaker.strong_count() == 0
    }

    /// Another instance's breaker of this name opened, `left` of its cooldown still (at most
    /// this breaker's own cooldown is taken): this one opens too, and calls admitted before
    /// count for nothing after.
    pub fn opened_elsewhere(&self, left: Duration) {
        self.with(|breaker, link| link.heard(breaker, breaker.open_as_peer(left)));
    }

    /// Another instance's probe succeeded and closed its breaker of this name: this one
    /// closes too, forgetting what it counted.
    pub fn closed_elsewhere(&self) {
        self.with(|breaker, link| link.heard(breaker, breaker.close_as_peer()));
    }

    /// The transition this breaker made that the store has not recorded yet (it was down or
    /// slow), if the breaker is still in the state it reached: when the store answers again
    /// after an outage, announce it (it is the newest news) rather than deliver the store's
    /// state to this breaker.
    pub fn untold(&self) -> Option<Announcement> {
        let breaker = self.breaker.upgrade()?;
        let link = breaker.link()?;
        let (untold, pending) = link.pending.untold(breaker.state_now());
        let change = untold.and_then(|state| Change::of(&*breaker, state));
        match change {
            Some(change) => Some(Announcement::told(link, change, pending)),
            None => {
                link.pending.published(pending);
                None
            }
        }
    }

    fn with(&self, deliver: impl FnOnce(&dyn Linked, &BreakerLink)) {
        if let Some(breaker) = self.breaker.upgrade() {
            if let Some(link) = breaker.link() {
                deliver(&*breaker, link);
            }
        }
    }
}

/// A shared rate gate of this instance, as a store holds it to deliver what other instances
/// did ([`SharedStore::listen_gate`](super::SharedStore::listen_gate)). It holds the gate
/// weakly: clone it freely, and drop it once [`is_gone`](Self::is_gone).
///
/// ```
/// use resil_runtime::shared::GateNews;
///
/// /// A peer was throttled on the gate `name`.
/// fn deliver(listed: &[GateNews], name: &str) {
///     for gate in listed.iter().filter(|gate| gate.name() == name) {
///         gate.throttled_elsewhere();
///     }
/// }
/// ```
#[derive(Clone)]
pub struct GateNews {
    name: Arc<str>,
    gate: Weak<GateLink>,
}

impl fmt::Debug for GateNews {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GateNews")
            .field("name", &self.name)
            .field("gone", &self.is_gone())
            .finish()
    }
}

impl GateNews {
    pub(crate) fn new(gate: &Arc<GateLink>) -> Self {
        GateNews {
            name: Arc::clone(&gate.key),
            gate: Arc::downgrade(gate),
        }
    }

    /// The gate's name in the store (as [`GateLink::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared rather than copied by what lists the handle.
    #[cfg(feature = "redis")]
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// Whether the gate is gone (its policy or key dropped): the handle may be forgotten.
    pub fn is_gone(&self) -> bool {
        self.gate.strong_count() == 0
    }

    /// Whether this is `gate`'s handle: a store tells a hold to every gate of its name but the
    /// one that held (see [`SharedStore::hold`](crate::seams::SharedStore::hold)).
    ///
    /// ```
    /// use resil_runtime::shared::{GateLink, GateNews};
    ///
    /// /// `gate` was throttled: this instance's other gates of its name hear of it too.
    /// fn beside(listed: &[GateNews], gate: &GateLink) {
    ///     let others = listed.iter().filter(|news| news.name() == gate.name());
    ///     for news in others.filter(|news| !news.is_of(gate)) {
    ///         news.throttled_elsewhere();
    ///     }
    /// }
    /// ```
    pub fn is_of(&self, gate: &GateLink) -> bool {
        std::ptr::eq(self.gate.as_ptr(), gate)
    }

    /// Another instance was throttled on this gate (and held it in the store): the slots
    /// this instance's calls wait for are revoked, and taken again from the store after the
    /// hold.
    pub fn throttled_elsewhere(&self) {
        if let Some(gate) = self.gate.upgrade() {
            gate.revoke_waiting();
        }
    }

    /// The store answers again after an outage: the slots this instance's local gate
    /// promised alone meanwhile are revoked (the store's schedule does not count them) and
    /// taken again from the store.
    pub fn store_returned(&self) {
        if let Some(gate) = self.gate.upgrade() {
            gate.store_returned();
        }
    }
}
