//! A shared gate's reservation as a store sees it: what an attempt asks of one or two gates
//! ([`Reservation`], [`Ask`]), what the store answers ([`Reserved`]) and the slots it promises
//! ([`Slot`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::links::GateLink;
use super::share::SEEN_FOR;
use super::{whole_micros, Granted, SharedSlots, MAX_MICROS};
use crate::Rejected;

/// An attempt's request to the shared gates of its policy: the rate gate's and the token
/// gate's [`Ask`]s (one or both), reserved together or not at all
/// ([`SharedStore::reserve`](super::SharedStore::reserve)).
///
/// ```
/// use resil_runtime::shared::Reservation;
///
/// fn keys(reservation: &Reservation) -> Vec<&str> {
///     reservation.asks().map(|ask| ask.gate().name()).collect()
/// }
/// ```
pub struct Reservation {
    asks: [Option<Ask>; 2],
    limit: Option<Duration>,
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("asks", &self.asks().collect::<Vec<_>>())
            .field("limit", &self.limit)
            .finish()
    }
}

/// One gate's part of a [`Reservation`]: `cost` units, `interval` apart, with `tolerance`
/// ahead of the schedule allowed.
///
/// ```
/// use resil_runtime::shared::Ask;
///
/// fn units(ask: &Ask) -> String {
///     format!("{} × {} on {}", ask.cost(), ask.interval().as_micros(), ask.gate().name())
/// }
/// ```
#[derive(Debug)]
pub struct Ask {
    gate: Arc<GateLink>,
    cost: u64,
    interval: u64,
    tolerance: u64,
    heartbeat: bool,
    /// µs.
    alone: u64,
    /// µs.
    alone_used: u64,
}

impl Ask {
    /// The gate asked.
    pub fn gate(&self) -> &GateLink {
        &self.gate
    }

    /// Units to reserve (1 for a rate gate; the call's cost for a token gate).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The interval between two units now, in whole µs: the gate's declared interval, or
    /// longer while the provider is slowed down (each instance's local gate learns that).
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval)
    }

    /// How far ahead of the schedule a slot may start: the burst's credit, plus what a
    /// slower interval adds for these units (so that a slowed unit starts when it would
    /// have, and the longer interval is taken out of the schedule after it).
    pub fn tolerance(&self) -> Duration {
        Duration::from_micros(self.tolerance)
    }

    /// Whether this reservation is the heartbeat of one of this instance's users of the gate
    /// ([`user`](Self::user); one reservation a second per user): if so, how long to count
    /// that user among the gate's users (5 s). A store that counts them records the
    /// heartbeat with the reservation, granted or refused (a saturated gate refuses most),
    /// forgets the users silent for longer than that, and answers the count in the slot of a
    /// grant ([`Slot::with_instances`]) or with a refusal ([`Reserved::with_instances`]); while the store is down, each user's local gate then
    /// runs at its share of the rate (the rate and burst divided by the count), so that the
    /// users together keep about the declared rate. A heartbeat the store did not grant rides
    /// on the next reservation again. Optional: a store that ignores it leaves each instance
    /// at the whole rate while it is down.
    ///
    /// ```
    /// use resil_runtime::shared::Ask;
    ///
    /// fn counted(ask: &Ask) -> bool {
    ///     ask.heartbeat().is_some()
    /// }
    /// ```
    pub fn heartbeat(&self) -> Option<Duration> {
        self.heartbeat.then_some(SEEN_FOR)
    }

    /// How far past now the slots this instance's local gate granted alone (the store was
    /// down, or did not answer in time) and its callers still hold run its schedule; zero if
    /// none. This ask's units start no earlier than that in the store's schedule (`max(tat,
    /// now + alone)`), so that the slots granted alone are taken from it: a store that flaps
    /// never runs the two schedules side by side. [`Slot::from`] stays `tat` (past the calls
    /// made alone, [`alone_used`](Self::alone_used)): the slot given back (its caller gave up)
    /// takes back the charge of slots still waiting rather than leave a stretch of the
    /// schedule that no slot owns, and every reservation charges again what is still held.
    ///
    /// ```
    /// use resil_runtime::shared::Ask;
    /// use std::time::Duration;
    ///
    /// fn starts_after(ask: &Ask, tat: Duration, now: Duration) -> Duration {
    ///     tat.max(now + ask.alone())
    /// }
    /// ```
    pub fn alone(&self) -> Duration {
        Duration::from_micros(self.alone)
    }

    /// The part of [`alone`](Self::alone) whose calls were made: how far past now the slots
    /// granted alone and used run the local schedule (at most `alone`). The schedule before
    /// this ask's slot, its [`Slot::from`], is at least `now + alone_used`: a slot given back
    /// takes back the charge of slots still waiting, never of calls made.
    ///
    /// ```
    /// use resil_runtime::shared::Ask;
    /// use std::time::Duration;
    ///
    /// fn slot_from(ask: &Ask, tat: Duration, now: Duration) -> Duration {
    ///     tat.max(now + ask.alone_used())
    /// }
    /// ```
    pub fn alone_used(&self) -> Duration {
        Duration::from_micros(self.alone_used)
    }

    /// Which of this instance's users of the gate the [heartbeat](Self::heartbeat) is for:
    /// each policy (and each key of a keyed policy) whose gate has this name is one, with a
    /// number of its own in the process. A store counts the pairs of its instance and this
    /// number, so that a handler and a background worker of one instance sharing the gate
    /// count as two users and each takes half the share while the store is down.
    ///
    /// ```
    /// use resil_runtime::shared::Ask;
    ///
    /// fn member(instance: &str, ask: &Ask) -> String {
    ///     format!("{instance}:{}", ask.user())
    /// }
    /// ```
    pub fn user(&self) -> u64 {
        self.gate.user
    }
}

/// What an attempt asks of one shared gate, as the execution knows it.
pub(crate) struct GateAsk {
    pub(crate) gate: Arc<GateLink>,
    pub(crate) cost: u64,
    /// The local gate's interval now (ns).
    pub(crate) interval: u64,
    /// How far past now the slots the local gate granted alone and still holds run its
    /// schedule, those whose call was made apart (ns; 0: none).
    pub(crate) alone: super::Alone,
}

impl Reservation {
    /// The asks of one or two gates.
    pub(crate) fn new(gates: [Option<GateAsk>; 2], limit: Option<Duration>) -> Self {
        let asks = gates.map(|gate| {
            gate.map(
                |GateAsk {
                     gate,
                     cost,
                     interval,
                     alone,
                 }| {
                    let (interval, tolerance) = gate.schedule(cost, interval);
                    let heartbeat = gate.beat_due();
                    Ask {
                        gate,
                        cost: cost.min(MAX_MICROS),
                        interval,
                        tolerance,
                        heartbeat,
                        alone: alone.held.div_ceil(1000).min(MAX_MICROS),
                        alone_used: alone.used.div_ceil(1000).min(MAX_MICROS),
                    }
                },
            )
        });
        Reservation { asks, limit }
    }

    /// The store did not grant: each heartbeat rides on the next reservation unless the store
    /// `heard` it (it refused: a refusal counts the heartbeat, and one armed again by every
    /// refusal would make each reservation of a saturated gate a heartbeat).
    pub(crate) fn not_granted(&self, heard: bool) {
        for ask in self.asks() {
            if ask.heartbeat && !heard {
                ask.gate.beat_missed();
            }
        }
    }

    /// The gates asked, one or two, in the order their [`Slot`]s are answered.
    pub fn asks(&self) -> impl Iterator<Item = &Ask> + '_ {
        self.asks.iter().flatten()
    }

    /// The longest wait the attempt accepts (what is left of its deadline), if any: a gate
    /// whose wait exceeds it reserves nothing, and neither does the other.
    pub fn limit(&self) -> Option<Duration> {
        self.limit
    }

    /// The store's answer, as the execution reads it: a grant with fewer slots than asks is
    /// no answer (the local gates decide); a grant that waits past the limit is a refusal
    /// (the attempt would miss its deadline), its slots given back; a slot whose schedule
    /// runs further ahead than its wait and tolerance is taken to run that far.
    pub(crate) fn slots(&self, reserved: Reserved) -> SharedSlots {
        match reserved.0 {
            Answer::Refused { retry_in, users } => {
                for (ask, users) in self.asks().zip(users) {
                    ask.gate.saw(users);
                }
                SharedSlots::Refused(Rejected::RateLimited { retry_in })
            }
            Answer::Granted { wait, slots } if self.limit.is_some_and(|limit| wait > limit) => {
                for (ask, slot) in self.asks().zip(slots.into_iter().flatten()) {
                    ask.gate.refund(slot);
                }
                SharedSlots::Refused(Rejected::RateLimited { retry_in: wait })
            }
            Answer::Granted { wait, mut slots } => {
                for (ask, slot) in self.asks().zip(slots.iter_mut().flatten()) {
                    ask.gate.saw(slot.instances);
                    // The schedule runs at most the wait plus the ask's tolerance past now:
                    // further, the local gate would mirror it and refuse every call were the
                    // store to go.
                    slot.ahead = slot.ahead.min(wait.saturating_add(ask.tolerance()));
                }
                let mut given = slots.into_iter().flatten();
                let slots = [0, 1].map(|at| self.asks[at].as_ref().and_then(|_| given.next()));
                // Each gate's own wait: its slot is the ask's tolerance before the schedule
                // after it.
                let waits = [0, 1].map(|at| match (&self.asks[at], slots[at]) {
                    (Some(ask), Some(slot)) => slot.ahead.saturating_sub(ask.tolerance()),
                    _ => Duration::ZERO,
                });
                let complete = self
                    .asks
                    .iter()
                    .zip(&slots)
                    .all(|(ask, slot)| ask.is_some() == slot.is_some());
                if !complete {
                    return SharedSlots::Unavailable;
                }
                // The store answers again after the local gate granted slots alone (it was
                // down, or slower than `shared_timeout`): the callers still waiting for those
                // take theirs again from the store, as after an outage, rather than start
                // beside its schedule.
                for ask in self.asks().filter(|ask| ask.alone > 0) {
                    ask.gate.store_returned();
                }
                SharedSlots::Granted(Granted { wait, slots, waits })
            }
        }
    }
}

/// A store's answer to a [`Reservation`]: granted, with the wait and the slots, or refused.
///
/// ```
/// use resil_runtime::shared::{Reserved, Slot};
/// use std::time::Duration;
///
/// let slot = Slot::new(0, 100_000, 0, Duration::from_millis(100));
/// let granted = Reserved::granted(Duration::ZERO, [slot]);
/// let refused = Reserved::refused(Duration::from_secs(2));
/// # let _ = (granted, refused);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved(Answer);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Granted {
        wait: Duration,
        slots: [Option<Slot>; 2],
    },
    Refused {
        retry_in: Duration,
        /// The users the store counts for each gate asked (0: it did not say).
        users: [u64; 2],
    },
}

impl Reserved {
    /// Every gate reserved: the attempt waits `wait` (the longest of the gates' waits), and
    /// `slots` holds one [`Slot`] per [`Ask`], in the order of [`Reservation::asks`] (fewer
    /// slots than asks counts as no answer).
    pub fn granted(wait: Duration, slots: impl IntoIterator<Item = Slot>) -> Self {
        let mut slots = slots.into_iter();
        Reserved(Answer::Granted {
            wait,
            slots: [slots.next(), slots.next()],
        })
    }

    /// Nothing reserved: a gate's wait, `retry_in`, would exceed the reservation's limit.
    pub fn refused(retry_in: Duration) -> Self {
        Reserved(Answer::Refused {
            retry_in,
            users: [0; 2],
        })
    }

    /// The same refusal, saying how many users the store counts for each gate asked (one
    /// number per [`Ask`], in the order of [`Reservation::asks`]; 0 says nothing): the answer
    /// to the [heartbeats](Ask::heartbeat) of a refused reservation, which a saturated gate's
    /// mostly are (a grant says it in its slots, [`Slot::with_instances`]). A grant is kept
    /// as it is.
    ///
    /// ```
    /// use resil_runtime::shared::Reserved;
    /// use std::time::Duration;
    ///
    /// let refused = Reserved::refused(Duration::from_secs(2)).with_instances([3]);
    /// # let _ = refused;
    /// ```
    pub fn with_instances(self, instances: impl IntoIterator<Item = u64>) -> Self {
        match self.0 {
            Answer::Refused { retry_in, .. } => {
                let mut instances = instances.into_iter();
                let users = [(); 2].map(|()| instances.next().unwrap_or(0));
                Reserved(Answer::Refused { retry_in, users })
            }
            granted => Reserved(granted),
        }
    }
}

/// A slot a store promised in one gate: the gate's schedule before and after it (`from`,
/// `end`: theoretical arrival times in the store's own units, such as µs on its clock), the
/// gate's epoch then (its count of holds), and how far past now the schedule runs after it
/// (`ahead`, which this instance's local gate mirrors). resil hands it back, unchanged, to
/// [`SharedStore::refund`](super::SharedStore::refund).
///
/// ```
/// use resil_runtime::shared::Slot;
/// use std::time::Duration;
///
/// let slot = Slot::new(1_000, 101_000, 0, Duration::from_millis(100));
/// assert_eq!((slot.from(), slot.end(), slot.epoch()), (1_000, 101_000, 0));
/// assert_eq!(slot.ahead(), Duration::from_millis(100));
/// assert_eq!(slot.with_instances(3).instances(), Some(3));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub(crate) from: u64,
    pub(crate) end: u64,
    pub(crate) epoch: u64,
    pub(crate) ahead: Duration,
    /// The instances the store counts among the gate's users (0: it did not say).
    pub(crate) instances: u64,
}

impl Slot {
    /// The slot taking the schedule from `from` to `end`, promised in `epoch`, the schedule
    /// running `ahead` of now after it.
    pub fn new(from: u64, end: u64, epoch: u64, ahead: Duration) -> Self {
        Slot {
            from,
            end,
            epoch,
            ahead: Duration::from_micros(whole_micros(ahead)),
            instances: 0,
        }
    }

    /// The same slot, saying that `instances` instances use the gate (this one included):
    /// the answer to a [heartbeat](Ask::heartbeat). 0 says nothing.
    pub fn with_instances(self, instances: u64) -> Self {
        Slot { instances, ..self }
    }

    /// The instances the store said use the gate, if it said.
    pub fn instances(&self) -> Option<u64> {
        (self.instances > 0).then_some(self.instances)
    }

    /// The gate's schedule before this slot.
    pub fn from(&self) -> u64 {
        self.from
    }

    /// The gate's schedule after this slot: while it is still the gate's, the slot is the
    /// latest promised.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// The gate's epoch when the slot was promised (a hold moves it on).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How far past now the gate's schedule runs after this slot.
    pub fn ahead(&self) -> Duration {
        self.ahead
    }
}

/// A slot the store promised, as the execution holds it.
pub(crate) type RemoteSlot = Slot;

/// The slots of an attempt in the shared gates: the rate gate's, then the token gate's.
pub(crate) type RemoteSlots = [Option<RemoteSlot>; 2];
