//! How a call ends: in the checker, however it ends; as its result, or as the panic that
//! reached its caller, a world's own (a body's, a listener's) or not.

use std::any::Any;
use std::rc::Rc;

use crate::ear::LISTENER_PANIC;
use crate::provider::SimError;
use crate::world::World;

/// What a body's panic says.
pub(crate) const BODY_PANIC: &str = "sim: a body panics";

/// What a shared future whose inner future panicked says to its later pollers.
const SHARED_PANICKED: &str = "inner future panicked during poll";

/// Whether a panic is one a world planted (a body's, a listener's, or a shared call's that
/// passes one on).
pub(crate) fn planted(info: &std::panic::PanicHookInfo<'_>) -> bool {
    let message = (info.payload().downcast_ref::<String>().map(String::as_str))
        .or_else(|| info.payload().downcast_ref::<&str>().copied());
    message.is_some_and(|message| [BODY_PANIC, LISTENER_PANIC, SHARED_PANICKED].contains(&message))
}

/// How a caller's call ended: its result, or the message of the panic that reached it.
pub(crate) fn ended(result: Result<Result<u32, SimError>, Box<dyn Any + Send>>) -> String {
    match result {
        Ok(result) => describe(&result),
        Err(panic) => {
            let message = (panic.downcast_ref::<String>().map(String::as_str))
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(not a string)");
            // A shared call that panicked tells its later pollers so (`futures`' `Shared`).
            let own = [BODY_PANIC, LISTENER_PANIC, SHARED_PANICKED].contains(&message);
            format!(
                "panicked{}: {message}",
                if own { "" } else { " (not its own)" }
            )
        }
    }
}

pub(crate) fn describe(result: &Result<u32, SimError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(SimError::Rejected(rejected)) => format!("rejected: {rejected}"),
        Err(error) => format!("{error:?}"),
    }
}

/// Ends a call in the checker when its future ends, however it ends.
pub(crate) struct Ending {
    pub(crate) world: Rc<World>,
    pub(crate) index: usize,
    pub(crate) outcome: Option<String>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or_else(|| "dropped".to_owned());
        self.world.sync();
        self.world.checker.borrow_mut().end(self.index, &outcome);
    }
}
