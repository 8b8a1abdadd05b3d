//! What a call's answers say of the provider's limits, handed to the gates that learn
//! (`rate = "auto"`, `learn = true`): each for the slot the call took.

use tokio::time::Instant;

use super::Progress;
use crate::events::Event;
use crate::{ProviderLimits, RateGate};

impl Progress<'_> {
    /// For gates that learn: the call keeps its slots, marked used, until it ends (its
    /// answers teach the gates for them), and what its body reports is heard.
    #[inline(never)]
    pub(super) fn listen(&mut self) {
        if let Some(admission) = &mut self.admission {
            admission.reserved.used = true;
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

    /// When the slots this attempt waits for start, if a learning gate may have placed them
    /// sooner since (`None`: no such slot, or due now): see [`RateGate::due`].
    pub(super) fn slots_due(&self) -> Option<Instant> {
        let reserved = &self.admission.as_ref()?.reserved;
        let due = |gate: Option<&RateGate>, slot| gate.zip(slot).and_then(|(g, s)| g.due(s));
        let due = due(self.rate(), reserved.rate).max(due(self.token_rate(), reserved.tokens));
        due.filter(|due| *due > Instant::now())
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
