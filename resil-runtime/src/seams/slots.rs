//! A shared gate's reservation as a store sees it: what an attempt asks of one or two gates
//! ([`Reservation`], [`Ask`]), what the store answers ([`Reserved`]) and the slots it promises
//! ([`Slot`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::links::{whole_micros, GateLink};
use super::{Granted, SharedSlots, MAX_MICROS};
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
}

impl Reservation {
    pub(crate) fn new(
        gates: [Option<(Arc<GateLink>, u64, u64)>; 2],
        limit: Option<Duration>,
    ) -> Self {
        let asks = gates.map(|gate| {
            gate.map(|(gate, cost, interval)| {
                let (interval, tolerance) = gate.schedule(cost, interval);
                Ask {
                    gate,
                    cost: cost.min(MAX_MICROS),
                    interval,
                    tolerance,
                }
            })
        });
        Reservation { asks, limit }
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
    /// no answer (the local gates decide).
    pub(crate) fn slots(&self, reserved: Reserved) -> SharedSlots {
        match reserved.0 {
            Answer::Refused(retry_in) => SharedSlots::Refused(Rejected::RateLimited { retry_in }),
            Answer::Granted { wait, slots } => {
                let mut given = slots.into_iter().flatten();
                let slots = [0, 1].map(|at| self.asks[at].as_ref().and_then(|_| given.next()));
                let complete = self
                    .asks
                    .iter()
                    .zip(&slots)
                    .all(|(ask, slot)| ask.is_some() == slot.is_some());
                match complete {
                    true => SharedSlots::Granted(Granted { wait, slots }),
                    false => SharedSlots::Unavailable,
                }
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
    Refused(Duration),
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
        Reserved(Answer::Refused(retry_in))
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
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub(crate) from: u64,
    pub(crate) end: u64,
    pub(crate) epoch: u64,
    pub(crate) ahead: Duration,
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
        }
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
