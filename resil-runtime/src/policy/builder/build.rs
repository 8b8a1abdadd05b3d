//! Building a policy: the settings checked as a whole, then the breaker, bulkhead, gates and
//! keys made, and, for a shared policy, tied to its store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use resil_spec::rules;

use super::{BreakerSpec, BulkheadSize, PolicyBuilder};
use crate::breaker::{named, watch_breaker, watch_keys, BreakerConfig, BreakerKind};
use crate::budget::RetryBudget;
use crate::bulkhead::Bulkhead;
use crate::events::Event;
use crate::gate::RateGate;
use crate::policy::{Hedge, Keys, Policy, Settings, Tuning, Tunings};
use crate::{Backoff, ConfigError};

impl<K, C> PolicyBuilder<K, C> {
    /// Checks the settings and builds the policy.
    pub fn build(self) -> Result<Policy<K, C>, ConfigError> {
        let (policy, conflict) = self.build_reporting_conflict()?;
        match conflict {
            Some(conflict) => Err(conflict),
            None => Ok(policy),
        }
    }

    /// Like [`PolicyBuilder::build`], but a named breaker already in use with other settings
    /// is used as it is: the conflict goes to the listeners as [`Event::ConfigConflict`] (and
    /// fails a debug assertion) instead of refusing the policy. For sites that must come up
    /// whatever another site did, such as the ones `#[resilient]` generates.
    ///
    /// ```
    /// use resil_runtime::Policy;
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder()
    ///     .breaker_named("payments-doc", 5, Duration::from_secs(30))
    ///     .build_reporting_conflicts()
    ///     .unwrap();
    /// assert!(policy.breaker().is_some());
    /// ```
    pub fn build_reporting_conflicts(self) -> Result<Policy<K, C>, ConfigError> {
        let (policy, conflict) = self.build_reporting_conflict()?;
        if let Some(conflict) = conflict {
            let message = conflict.to_string();
            policy.settings.emit(|listener| {
                listener.on_event(&Event::ConfigConflict {
                    site: &policy.settings.name,
                    message: &message,
                })
            });
            debug_assert!(false, "{}: {message}", policy.settings.name);
        }
        Ok(policy)
    }

    fn build_reporting_conflict(self) -> Result<(Policy<K, C>, Option<ConfigError>), ConfigError> {
        let backoff = match self.backoff {
            Some((base, cap)) => Backoff::new(base, cap)?,
            None => Backoff::default(),
        }
        .with_jitter(self.jitter);
        let tuning = Tuning {
            enabled: true,
            timeout: self.timeout,
            deadline: self.deadline,
            idle: self.idle,
            retry: self.retry,
            retry_after_max: self.retry_after_max,
            backoff,
        };
        tuning.check()?;
        // Waiters of one value each (and an overflow lane), or all in one lane.
        let lanes = if self.fair { self.max_keys } else { 0 };
        let mut bulkhead = match self.bulkhead {
            None => None,
            Some(BulkheadSize::Fixed(limit)) => Some(Bulkhead::new(limit)?),
            Some(BulkheadSize::Adaptive(min, max)) => Some(Bulkhead::adaptive(min, max)?),
        }
        .map(|bulkhead| bulkhead.queued(self.bulkhead_queue))
        .map(|bulkhead| match self.by_priority {
            true => bulkhead.ordered(lanes),
            false => bulkhead,
        });
        let gate = |key, rate: Option<(u64, Duration, u64)>, exact: bool, learn: bool| {
            let Some((count, period, burst)) = rate else {
                return Ok(learn.then(RateGate::auto));
            };
            let gate = RateGate::for_key(key, count, period, burst)?;
            let gate = if exact { gate.exact() } else { gate };
            Ok::<_, ConfigError>(Some(if learn { gate.learning() } else { gate }))
        };
        let (exact, learn) = (self.exact, self.learn);
        #[cfg(feature = "shared")]
        let shared = self.shared.is_some();
        #[cfg(not(feature = "shared"))]
        let shared = false;
        // A shared gate's callers ask its store in turn (`gate/asking.rs`), at the rate gate
        // (its question takes the token gate's units too), else at the token gate; the turn
        // is not made for a gate whose answers move the slots it granted yet.
        let has_rate = self.rate.is_some() || learn.rate;
        let has_tokens = self.token_rate.is_some() || learn.token_rate;
        rules::ordered_turn(
            self.by_priority,
            shared,
            has_rate.then_some(learn.rate),
            has_tokens.then_some(learn.token_rate),
        )?;
        let mut rate =
            gate("rate", self.rate, exact.rate, learn.rate)?.map(|gate| match self.by_priority {
                true => gate.ordered(lanes),
                false => gate,
            });
        if let Some(percent) = self.batch_share.rate {
            let gate = (rate.take())
                .filter(|_| !self.per_key.rate)
                .ok_or(ConfigError::BatchShareWithoutRate)?;
            rate = Some(gate.batch_share(percent)?);
        }
        // A shared token gate's units are asked of its store with the rate gate's slot, in
        // the rate gate's turn; alone, the token gate holds the turn.
        let tokens_in_turn = self.by_priority && (!shared || !has_rate);
        let mut token_rate = gate(
            "token_rate",
            self.token_rate,
            exact.token_rate,
            learn.token_rate,
        )?
        .map(|gate| match tokens_in_turn {
            true => gate.ordered_by_units(lanes),
            false => gate,
        });
        if let Some(percent) = self.batch_share.token_rate {
            let gate = (token_rate.take())
                .filter(|gate| {
                    gate.orders() && !gate.learns() && !shared && !self.per_key.token_rate
                })
                .ok_or(ConfigError::BatchShareWithoutTokenGate)?;
            token_rate = Some(gate.batch_share(percent)?);
        }
        let name = self.name.unwrap_or_else(|| Arc::from("policy"));
        let budget = self
            .budget
            .map(|(ratio, min_per_sec)| RetryBudget::new(ratio, min_per_sec))
            .transpose()?;
        rules::max_keys(self.max_keys)?;
        if let Some((count, delay)) = self.hedge {
            rules::hedge(count, delay, self.timeout, self.retry)?;
        }
        // A breaker sees at most the calls its gate lets through; a breaker shared by the keys
        // of gates per key sees more than one gate's, so no bound holds.
        let one_gate = !(self.per_key.rate && matches!(self.breaker, BreakerSpec::Named(..)));
        if let (
            BreakerKind::FailureRate {
                window, min_calls, ..
            }
            | BreakerKind::SlowCall {
                window, min_calls, ..
            },
            Some(rate),
            true,
        ) = (self.breaker_kind, self.rate, one_gate)
        {
            rules::min_calls_within_rate(min_calls, window, rate)?;
        }
        let mut conflict = None;
        let mut per_key_breaker = None;
        let breaker = match self.breaker {
            BreakerSpec::None => None,
            BreakerSpec::Given(breaker) => {
                watch_breaker(&breaker);
                Some(breaker)
            }
            BreakerSpec::Named(name, threshold, cooldown) => {
                let config =
                    BreakerConfig::new(threshold, cooldown)?.with_kind(self.breaker_kind)?;
                let (breaker, clash) = named(&name, config);
                conflict = clash;
                Some(breaker)
            }
            BreakerSpec::PerKey(threshold, cooldown) => {
                let config =
                    BreakerConfig::new(threshold, cooldown)?.with_kind(self.breaker_kind)?;
                per_key_breaker = Some(config);
                None
            }
        };
        #[cfg(feature = "shared")]
        let sharing = match self.shared {
            None => None,
            Some(sharing) => {
                rules::shared_timeout(sharing.timeout)?;
                // Gates per key are still here: they move to the keys below, links and all.
                rules::shares(
                    breaker.is_some()
                        || per_key_breaker.is_some()
                        || rate.is_some()
                        || token_rate.is_some(),
                )?;
                let kinds = [
                    breaker.as_ref().map(|b| b.config().kind()),
                    per_key_breaker.map(|c| c.kind()),
                ];
                for kind in kinds.into_iter().flatten() {
                    if let BreakerKind::FailureRate { window, .. }
                    | BreakerKind::SlowCall { window, .. } = kind
                    {
                        rules::shared_window(window)?;
                    }
                }
                // One for the policy's links, however many keys it gets.
                let sharing = Arc::new(sharing);
                if let Some(breaker) = &breaker {
                    breaker.share(&sharing, breaker.name());
                }
                if let Some(gate) = &mut rate {
                    gate.share(&sharing, "rate", &name);
                }
                if let Some(gate) = &mut token_rate {
                    gate.share(&sharing, "tokens", &name);
                }
                Some(sharing)
            }
        };
        let keys = match self.key {
            None => None,
            Some(label) => {
                let per_key = self.per_key;
                rules::per_key("bulkhead", !per_key.bulkhead || bulkhead.is_some())?;
                rules::per_key("rate", !per_key.rate || rate.is_some())?;
                rules::per_key("token_rate", !per_key.token_rate || token_rate.is_some())?;
                // What is per key moves from the shared settings to the keys' prototypes.
                let key_bulkhead = bulkhead.take_if(|_| per_key.bulkhead);
                let key_rate = rate.take_if(|_| per_key.rate);
                let key_tokens = token_rate.take_if(|_| per_key.token_rate);
                if per_key_breaker.is_none()
                    && key_bulkhead.is_none()
                    && key_rate.is_none()
                    && key_tokens.is_none()
                {
                    return Err(ConfigError::KeyScopesNothing {
                        label: label.to_string(),
                    });
                }
                #[cfg_attr(not(feature = "shared"), allow(unused_mut))]
                let mut keys = Keys::new(
                    label,
                    self.max_keys,
                    per_key_breaker,
                    key_bulkhead,
                    key_rate,
                    key_tokens,
                );
                #[cfg(feature = "shared")]
                if let Some(sharing) = &sharing {
                    keys.share(sharing, &name);
                }
                let keys = Arc::new(keys);
                if keys.has_breakers() {
                    watch_keys(&keys);
                }
                Some(keys)
            }
        };
        let gated = rate.is_some()
            || token_rate.is_some()
            || keys.as_ref().is_some_and(|keys| keys.gated());
        let learns = [&rate, &token_rate]
            .into_iter()
            .flatten()
            .any(RateGate::learns)
            || keys.as_ref().is_some_and(|keys| keys.learns());
        let admits = gated || breaker.is_some() || bulkhead.is_some() || keys.is_some();
        let adaptive = (bulkhead.as_ref())
            .or(keys.as_ref().and_then(|keys| keys.bulkhead()))
            .is_some_and(Bulkhead::is_adaptive);
        #[cfg(feature = "metrics")]
        let meters = crate::meter::Slot::new(Arc::clone(&name), bulkhead.is_some());
        let settings = Settings {
            tunings: Tunings::new(Arc::clone(&name), tuning),
            name,
            rng: self
                .seed
                .map(|seed| Mutex::new(SmallRng::seed_from_u64(seed))),
            breaker,
            keys,
            bulkhead,
            rate,
            token_rate,
            gated,
            learns,
            admits,
            adaptive,
            attentive: adaptive || learns,
            budget,
            independent: self.independent,
            commit_hold: self.commit_hold,
            hedge: self.hedge.map(|(count, delay)| Hedge { count, delay }),
            listener: self.listener,
            #[cfg(feature = "metrics")]
            meters,
        };
        Ok((Policy::new(settings, self.classify), conflict))
    }
}
