//! What stands between an operation and its calls: the breaker it goes through, its place in
//! the bulkhead, its slots in the rate gates, and the key whose state it uses. A policy that
//! declares none of them (`Settings::admits`) holds none and never asks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::breaker::Breaker;
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::gate::{RateGate, Slot};
use crate::operation;
use crate::policy::{BreakerRef, Scope, Settings, Tuning};
use crate::priority::{Place, Served};
use crate::registry::Held;
use crate::Rejected;

use super::Progress;

/// A caller's wait for a place in the bulkhead's queue, and how it was served if it waited in
/// turn.
pub(super) type PermitWait<'p> = Pin<
    Box<dyn Future<Output = Result<(BulkheadPermit<'p>, Option<Served>), Rejected>> + Send + 'p>,
>;

/// One operation's standing with its breaker, bulkhead and gates.
pub(crate) struct Admission<'p> {
    pub(super) breaker: Option<BreakerRef<'p>>,
    /// This call's key's breaker, bulkhead and gates, for a keyed policy: held, so the policy
    /// does not forget the key meanwhile.
    pub(super) scope: Option<Held<Scope>>,
    pub(super) permit: Option<BulkheadPermit<'p>>,
    entry: Entry,
    /// What the next attempt costs the token gate.
    pub(super) cost: u64,
    /// How urgent the operation is and whose share it waits in, where callers wait in turn.
    pub(super) place: Place,
    /// Slots reserved in the rate gates for the current attempt, each as its gate promised
    /// it: given back if the attempt is refused before calling.
    pub(super) reserved: Reserved,
}

/// The slots an attempt holds in the rate gates, each as its gate promised it: a throttle on
/// one gate revokes its slot only, and each goes back to its own gate.
#[derive(Debug, Default)]
pub(super) struct Reserved {
    pub(super) rate: Option<Slot>,
    pub(super) tokens: Option<Slot>,
    /// A batch call's place in a shared rate gate's batch share, while it waits for it.
    #[cfg(feature = "shared")]
    pub(super) share: Option<Slot>,
    /// The call was made with these slots: kept, for gates that learn, until its answer
    /// teaches them; never given back.
    pub(super) used: bool,
    /// One of two slots came far before the other and went back: it is taken again when the
    /// other comes (see `Progress::take_deferred`).
    pub(super) deferred: bool,
    /// The same slots in Redis, when the shared gates granted them.
    #[cfg(feature = "shared")]
    pub(super) remote: Option<Box<Remote>>,
    /// For slots of shared gates that the local gates promised alone (the store down): the
    /// store's returns then, so that one since revokes them.
    #[cfg(feature = "shared")]
    pub(super) returns: Option<u64>,
    /// For those slots, what each gate's link charges the store for them until they go back
    /// (see `GateLink::granted_alone`; 0: none).
    #[cfg(feature = "shared")]
    pub(super) alone: [u64; 2],
    /// This instance's turn to ask a shared gate that orders its waiters, from the question
    /// until the slot granted comes (see `gate/asking.rs`).
    #[cfg(feature = "shared")]
    pub(super) asking: Option<crate::gate::AskTurn>,
}

/// The slots the shared gates granted an attempt (the rate gate's, then the token gate's),
/// and the local slot of one that went back while the other comes (see
/// `Progress::defer_shared`): a throttle on its gate since, here or heard from another
/// instance, revokes it.
#[cfg(feature = "shared")]
#[derive(Debug)]
pub(super) struct Remote {
    pub(super) slots: crate::seams::RemoteSlots,
    pub(super) went_back: Option<Slot>,
}

/// How the operation stands with its bulkhead before the first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// A place is held, or there is no bulkhead.
    Admitted,
    /// No place, and no queue: rejected before the first call.
    Full,
    /// No place yet: the first attempt waits in the queue.
    Queue,
}

impl<'p> Admission<'p> {
    /// Asks the bulkhead for a place at once. `None` for a policy with nothing before its
    /// calls, or switched off (`tuning.enabled`): it goes straight to the body.
    #[inline]
    pub(super) fn start(
        settings: &'p Settings,
        tuning: &Tuning,
        breaker: Option<BreakerRef<'p>>,
        scope: Option<Held<Scope>>,
    ) -> Option<Self> {
        if !settings.admits || !tuning.enabled {
            return None;
        }
        let own = scope.as_ref().and_then(|scope| scope.bulkhead.as_ref());
        let shared = settings.bulkhead.as_ref();
        let (permit, entry) = match (shared, own) {
            (Some(bulkhead), _) => enter(bulkhead, bulkhead.try_acquire()),
            (None, Some(bulkhead)) => enter(bulkhead, bulkhead.try_acquire_owned()),
            (None, None) => (None, Entry::Admitted),
        };
        Some(Admission {
            breaker,
            scope,
            permit,
            entry,
            cost: 1,
            place: Place::default(),
            reserved: Reserved::default(),
        })
    }

    #[inline]
    pub(super) fn breaker(&self) -> Option<&Breaker> {
        self.breaker.as_ref().map(BreakerRef::get)
    }

    /// A hedge's admission: the same breaker, key and gates, and slots of its own. It takes
    /// no place in the bulkhead: a hedge starts only once a racer called, so the operation
    /// holds its place by then, and the hedge shares it.
    pub(super) fn hedge(&self) -> Self {
        Admission {
            breaker: self.breaker.as_ref().map(BreakerRef::clone_ref),
            scope: self.scope.clone(),
            permit: None,
            entry: Entry::Admitted,
            cost: self.cost,
            place: self.place,
            reserved: Reserved::default(),
        }
    }

    /// A hedge's admission on another key's state (a route's next target): its breaker and
    /// gates, and a place in its bulkhead when the bulkhead is per key; with a bulkhead of
    /// all calls it shares the operation's place.
    pub(super) fn elsewhere(
        settings: &Settings,
        breaker: Option<BreakerRef<'p>>,
        scope: Option<Held<Scope>>,
    ) -> Self {
        let mut admission = Admission {
            breaker: None,
            scope: None,
            permit: None,
            entry: Entry::Admitted,
            cost: 1,
            place: Place::default(),
            reserved: Reserved::default(),
        };
        admission.retarget(settings, breaker, scope);
        admission
    }

    /// Moves the operation to another key's state, for a route's next target: its breaker
    /// and gates, and a place in its bulkhead when the bulkhead is per key (the last key's
    /// place is given back first). A bulkhead of all calls keeps the place the operation has.
    pub(super) fn retarget(
        &mut self,
        settings: &Settings,
        breaker: Option<BreakerRef<'p>>,
        scope: Option<Held<Scope>>,
    ) {
        self.breaker = breaker;
        if settings.bulkhead.is_none() {
            self.permit = None;
            let own = scope.as_ref().and_then(|scope| scope.bulkhead.as_ref());
            (self.permit, self.entry) = match own {
                Some(bulkhead) => enter(bulkhead, bulkhead.try_acquire_owned()),
                None => (None, Entry::Admitted),
            };
        }
        self.scope = scope;
    }

    /// The bulkhead: all calls', or this key's.
    #[inline]
    pub(super) fn bulkhead<'s>(&'s self, settings: &'s Settings) -> Option<&'s Bulkhead> {
        (settings.bulkhead.as_ref()).or_else(|| self.scope.as_ref()?.bulkhead.as_deref())
    }

    /// The rate gate: all calls', or this key's.
    #[inline]
    pub(super) fn rate<'s>(&'s self, settings: &'s Settings) -> Option<&'s RateGate> {
        (settings.rate.as_ref()).or_else(|| self.scope.as_ref()?.rate.as_ref())
    }

    /// The token gate: all calls', or this key's.
    #[inline]
    pub(super) fn token_rate<'s>(&'s self, settings: &'s Settings) -> Option<&'s RateGate> {
        (settings.token_rate.as_ref()).or_else(|| self.scope.as_ref()?.token_rate.as_ref())
    }

    /// A bulkhead found full, with no queue, refuses the first attempt.
    #[inline]
    pub(super) fn refuse_if_full(&mut self, settings: &Settings) -> Result<(), Rejected> {
        if self.entry != Entry::Full {
            return Ok(());
        }
        self.entry = Entry::Admitted;
        let limit = self.bulkhead(settings).map_or(0, Bulkhead::limit);
        Err(Rejected::BulkheadFull { limit })
    }

    /// The wait for a place in the bulkhead's queue, if this operation has yet to wait in it.
    #[inline]
    pub(super) fn queue(&mut self, settings: &'p Settings) -> Option<PermitWait<'p>> {
        if self.entry != Entry::Queue {
            return None;
        }
        self.entry = Entry::Admitted;
        // Rare (the bulkhead is full), so the wait is boxed to keep every attempt small.
        if let Some(bulkhead) = &settings.bulkhead {
            return Some(Box::pin(bulkhead.acquire_in_turn(self.place)));
        }
        let bulkhead = Arc::clone(self.scope.as_ref()?.bulkhead.as_ref()?);
        let place = self.place;
        Some(Box::pin(async move {
            let (permit, served) = bulkhead.acquire_in_turn_owned(place).await?;
            let permit: BulkheadPermit<'p> = permit;
            Ok((permit, served))
        }))
    }
}

/// The admission as the execution asks it: nothing, for a policy with nothing before its calls.
impl<'p> Progress<'p> {
    /// A hedge sent to another target ended its race: its admission becomes the operation's,
    /// with the operation's place in a bulkhead of all calls, and the frame names its breaker
    /// (the frame is published: the race is being polled).
    pub(super) fn moved_to(&mut self, admission: Option<Admission<'p>>) {
        let Some(mut admission) = admission else {
            return;
        };
        if self.settings.bulkhead.is_some() {
            admission.permit = self.admission.as_mut().and_then(|own| own.permit.take());
        }
        operation::set_breaker(admission.breaker().map_or(0, super::address));
        self.admission = Some(admission);
    }

    #[inline]
    pub(super) fn breaker(&self) -> Option<&Breaker> {
        self.admission.as_ref()?.breaker()
    }

    #[inline]
    pub(super) fn breaker_ref(&self) -> Option<&BreakerRef<'p>> {
        self.admission.as_ref()?.breaker.as_ref()
    }

    /// The rate gate: all calls', or this key's.
    #[inline]
    pub(super) fn rate(&self) -> Option<&RateGate> {
        self.admission.as_ref()?.rate(self.settings)
    }

    /// The token gate: all calls', or this key's.
    #[inline]
    pub(super) fn token_rate(&self) -> Option<&RateGate> {
        self.admission.as_ref()?.token_rate(self.settings)
    }

    /// What the next attempt costs the token gate.
    #[inline]
    pub(super) fn cost(&self) -> u64 {
        self.admission
            .as_ref()
            .map_or(1, |admission| admission.cost)
    }

    /// Keeps `reserved` as the current attempt's slots.
    #[inline]
    pub(super) fn hold(&mut self, reserved: Reserved) {
        if let Some(admission) = &mut self.admission {
            admission.reserved = reserved;
        }
    }
}

/// Where an operation stands after asking `bulkhead` for a permit at once.
#[inline]
fn enter<'p>(
    bulkhead: &Bulkhead,
    permit: Result<BulkheadPermit<'p>, Rejected>,
) -> (Option<BulkheadPermit<'p>>, Entry) {
    match permit {
        Ok(permit) => (Some(permit), Entry::Admitted),
        Err(_) if bulkhead.queue() > 0 => (None, Entry::Queue),
        Err(_) => (None, Entry::Full),
    }
}
