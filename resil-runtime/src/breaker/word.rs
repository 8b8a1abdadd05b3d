//! The breaker's state word: state, consecutive failures and generation in one atomic, so
//! that admitting a closed call is one load and counting a failure one compare-and-swap.

use super::BreakerState;

pub(super) const CLOSED: u64 = 0;
pub(super) const OPEN: u64 = 1;
pub(super) const HALF_OPEN: u64 = 2;

/// State, consecutive failures and generation in one atomic word, so that "count this failure
/// if the breaker is still in the generation that admitted the call" is one compare-and-swap:
/// bits 0-1 the state, 2-33 the failures, 34-63 the generation (wrapping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Word(pub(super) u64);

impl Word {
    const GENERATION_SHIFT: u32 = 34;

    pub(super) fn state(self) -> u64 {
        self.0 & 0b11
    }

    pub(super) fn failures(self) -> u32 {
        (self.0 >> 2) as u32
    }

    pub(super) fn generation(self) -> u32 {
        (self.0 >> Self::GENERATION_SHIFT) as u32
    }

    pub(super) fn with_failures(self, failures: u32) -> Word {
        Word(self.0 & !(u64::from(u32::MAX) << 2) | u64::from(failures) << 2)
    }

    /// The next generation, in `state`, with no failure counted.
    pub(super) fn next(self, state: u64) -> Word {
        let generation = u64::from(self.generation().wrapping_add(1)) & ((1 << 30) - 1);
        Word(generation << Self::GENERATION_SHIFT | state)
    }
}

impl BreakerState {
    pub(super) fn from_bits(state: u64) -> Self {
        match state {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}
