//! What a call tells its operation before its attempts: what each costs the token gate, how
//! urgent it is, and whose share it waits in.

use super::Execution;

impl<E> Execution<'_, E> {
    /// What the next attempts cost the policy's token gate (`rate_cost`; 1 unless set).
    pub fn set_cost(&mut self, cost: u64) {
        if let Some(admission) = &mut self.progress.admission {
            admission.cost = cost;
        }
    }

    /// How urgent this operation is (`priority = ARG`): where the policy serves its waiters by
    /// priority ([`PolicyBuilder::by_priority`](crate::PolicyBuilder::by_priority)), the
    /// order in which it gets a slot or a place when it must wait for one.
    /// [`Priority::Default`](crate::Priority::Default) unless set.
    pub fn set_priority(&mut self, priority: crate::Priority) {
        if let Some(admission) = &mut self.progress.admission {
            admission.place.set_class(priority);
        }
    }

    /// Whose share this operation waits in (`fair = ARG`): where the policy serves its
    /// waiters fairly ([`PolicyBuilder::fair`](crate::PolicyBuilder::fair)), the waiters of
    /// one class are served in turn across the values given here, so that a value with 100
    /// calls waiting and one with 5 alternate. Calls that set none share one value.
    ///
    /// ```
    /// use std::time::Duration;
    /// use resil_runtime::{Next, Policy, Rejected};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// // What `#[resilient(rate = "10/s", fair = tenant)]` builds.
    /// let policy = Policy::builder()
    ///     .rate(10, Duration::from_secs(1), 1)
    ///     .fair()
    ///     .build()
    ///     .unwrap();
    /// let mut execution = policy.execute::<Rejected>();
    /// execution.set_fair_key("tenant-42");
    /// let Next::Done(outcome) = execution.attempt(async { Ok(5) }).await else {
    ///     unreachable!("no retry declared")
    /// };
    /// assert_eq!(outcome.into_result(), Ok(5));
    /// # }
    /// ```
    pub fn set_fair_key<V: std::hash::Hash + ?Sized>(&mut self, value: &V) {
        if let Some(admission) = &mut self.progress.admission {
            admission.place.set_lane(crate::priority::lane(value));
        }
    }

    /// How urgent this operation is and whose share it waits in, at once, as a request
    /// carried them (see [`Order`](crate::Order)): [`Execution::set_priority`] and
    /// [`Execution::set_fair_key`] together.
    pub fn set_order(&mut self, order: crate::Order) {
        if let Some(admission) = &mut self.progress.admission {
            admission.place = order.place();
        }
    }
}
