//! What a call's answers say of the provider's limits, handed to the gates that learn
//! (`rate = "auto"`, `learn = true`): each for the slot the call took.

use tokio::time::Instant;

use super::Progress;

/// Where a learning gate's declared ceiling, counted over the starts, leaves an attempt whose
/// slots came ([`Progress::within_ceilings`]).
pub(super) enum Ceiling {
    /// It starts now.
    Now,
    /// It waits for its slots until then.
    At(Instant),
    /// Its slots, granted by the store, went back: it asks again then.
    #[cfg(feature = "shared")]
    Again(Instant),
}
use crate::events::Event;
use crate::{ProviderLimits, RateGate, Rejected};

impl Progress<'_> {
    /// For gates that learn: the call keeps its slots, marked used, until it ends (its
    /// answers teach the gates for them), and what its body reports is heard.
    #[inline(never)]
    pub(super) fn listen(&mut self) {
        if let Some(admission) = &mut self.admission {
            admission.reserved.used = true;
            // The slots are kept for the answer; the turn to ask goes to the next caller.
            #[cfg(feature = "shared")]
            {
                admission.reserved.asking = None;
            }
        }
        crate::operation::listen();
    }

    /// What the call's body told of the provider's limits during a poll, and when: the gates
    /// learn from it at once, before the call ends.
    pub(super) fn heard(&mut self, heard: Option<(ProviderLimits, Instant)>) {
        if let Some((said, at)) = heard {
            self.teach(said, at);
        }
    }

    /// When the slots this attempt waits for start, the later of its gates', now that a
    /// learning gate may have placed its slot sooner (`None`: no slot, or due now): see
    /// [`RateGate::due`]. The other gate's counts too, or a caller looking again at the
    /// learning gate's slot would start before the other's (seed 1172 of the simulator);
    /// unless the store granted it, whose wait holds for it. That gate promised its slot
    /// within the deadline: read at the gate's share now, which a store gone since may have
    /// grown, it is kept there (seed 27394: 278 ms past the deadline).
    pub(super) fn slots_due(&self) -> Option<Instant> {
        let reserved = &self.admission.as_ref()?.reserved;
        #[cfg(feature = "shared")]
        let granted = reserved.remote.is_some();
        #[cfg(not(feature = "shared"))]
        let granted = false;
        let start_by = self.start_by();
        let due = |gate: Option<&RateGate>, slot, cost| {
            let (gate, slot) = gate.zip(slot)?;
            match gate.learns() {
                true => gate.due(slot),
                false => (!granted).then(|| {
                    let due = gate.due_unlearnt(slot, cost);
                    start_by.map_or(due, |start_by| due.min(start_by))
                }),
            }
        };
        let rate = due(self.rate(), reserved.rate, 1);
        let due = rate.max(due(self.token_rate(), reserved.tokens, self.cost()));
        due.filter(|due| *due > Instant::now())
    }

    /// This attempt's slots came: it starts now if each learning gate's declared ceiling,
    /// counted over the starts, allows it, or not before the instant it gives (see
    /// [`RateGate::start_within_ceiling`]); a wait past the deadline refuses it. Out of line:
    /// only policies whose gates learn get here.
    #[inline(never)]
    pub(super) fn within_ceilings(&mut self) -> Result<Ceiling, Rejected> {
        let Some(reserved) = self.admission.as_ref().map(|a| &a.reserved) else {
            return Ok(Ceiling::Now);
        };
        let (rate_slot, token_slot) = (reserved.rate, reserved.tokens);
        let rate = match self.rate().zip(rate_slot) {
            Some((gate, slot)) => match gate.start_within_ceiling(slot, 1) {
                Err(at) => return self.not_before(at),
                Ok(started) => Some(started),
            },
            None => None,
        };
        let cost = self.cost();
        let tokens = (self.token_rate().zip(token_slot))
            .map(|(gate, slot)| gate.start_within_ceiling(slot, cost));
        if let Some(Err(at)) = tokens {
            if let Some((gate, started)) = self.rate().zip(rate) {
                gate.unstart(started);
            }
            return self.not_before(at);
        }
        Ok(Ceiling::Now)
    }

    /// The attempt starts at `at`, if that is within its deadline. Slots the store granted
    /// are given back and asked for again then: moved later here, one would come closer to
    /// another instance's next, which the store spaced it from.
    fn not_before(&mut self, at: Instant) -> Result<Ceiling, Rejected> {
        let now = Instant::now();
        if self
            .start_by()
            .is_some_and(|start_by| at > start_by.max(now))
        {
            return Err(Rejected::RateLimited {
                retry_in: at.saturating_duration_since(now),
            });
        }
        #[cfg(feature = "shared")]
        if (self.admission.as_ref()).is_some_and(|admission| admission.reserved.remote.is_some()) {
            self.refund_slots();
            return Ok(Ceiling::Again(at));
        }
        Ok(Ceiling::At(at))
    }

    /// The call ended: what its body told last teaches the gates; a probe that was answered
    /// without a word leaves its auto gate open, and one that had no answer (cut by its
    /// timeout, or failed before the provider answered) lets another caller probe.
    #[inline(never)]
    pub(super) fn learn(&mut self, answered: bool) {
        self.heard(crate::operation::heard());
        let Some(reserved) = self
            .admission
            .as_mut()
            .map(|admission| std::mem::take(&mut admission.reserved))
            .filter(|reserved| reserved.used)
        else {
            return;
        };
        let max_wait = self.tuning.retry_after_max;
        let slots = [
            (self.rate(), reserved.rate),
            (self.token_rate(), reserved.tokens),
        ];
        for (gate, slot) in slots {
            match gate.zip(slot) {
                Some((gate, slot)) if answered => {
                    gate.learn(None, Instant::now(), slot, max_wait);
                }
                Some((gate, slot)) => gate.probe_ended(slot),
                None => {}
            }
        }
    }

    /// The gates learn what `said` (heard at `at`) says of their limits, each for the slot
    /// the call took: the gauge follows every rate learnt, the listener and the tracing
    /// subscriber hear a move of more than a tenth since they last heard.
    fn teach(&self, said: ProviderLimits, at: Instant) {
        let Some(reserved) = (self.admission.as_ref())
            .map(|admission| &admission.reserved)
            .filter(|reserved| reserved.used)
        else {
            return;
        };
        let max_wait = self.tuning.retry_after_max;
        let gates = [
            (self.rate(), reserved.rate, said.requests, "rate"),
            (
                self.token_rate(),
                reserved.tokens,
                said.tokens,
                "token_rate",
            ),
        ];
        for (gate, slot, quota, which) in gates {
            let Some((gate, slot)) = gate.zip(slot) else {
                continue;
            };
            let Some(learnt) = gate.learn(quota, at, slot, max_wait) else {
                continue;
            };
            let key = gate.learnt_key();
            #[cfg(feature = "metrics")]
            crate::meter::rate_learnt(&self.settings.name, key, which, learnt.to);
            let Some(from) = learnt.news else {
                continue;
            };
            #[cfg(feature = "tracing")]
            tracing::info!(
                site = &*self.settings.name,
                key = key.unwrap_or_default(),
                gate = which,
                from,
                to = learnt.to,
                "a rate gate learnt the provider's rate"
            );
            self.notify(|listener, site, _| {
                listener.on_event(&Event::RateLearnt {
                    site,
                    key,
                    gate: which,
                    from,
                    to: learnt.to,
                });
            });
        }
    }
}
