//! Errors resil does not own, classified by their chain: a boxed `dyn Error` (and, with the
//! `anyhow` feature, an `anyhow::Error`) says what the first error of its `source()` chain
//! whose type is `Transient` says. An error nothing in the chain classifies is permanent.
//!
//! resil's own types are known here; a program's are listed in [`TRANSIENT_TYPES_0_1`] at link
//! time, each where it is declared (by `#[derive(Transient)]` or `resil::transient_in_chains!`).
//! Nothing runs to fill the list, and only an error's classification reads it.

use std::error::Error;
use std::io;
use std::time::Duration;

use linkme::distributed_slice;

use crate::{Rejected, Transient};

/// One `Transient` type looked for in a chain: the error seen as `Transient`, when it is of
/// that type ([`transient_type`]).
#[doc(hidden)]
pub type TransientType = for<'a> fn(&'a (dyn Error + 'static)) -> Option<&'a dyn Transient>;

/// Every type an error of a chain can be classified as. Named for the release line (0.1; the
/// name moves with the minor version until 1.0): two lines of resil in one program (through
/// two dependencies) each keep their own, since linkme refuses at startup two slices of one
/// name.
#[doc(hidden)]
#[distributed_slice]
pub static TRANSIENT_TYPES_0_1: [TransientType];

/// The [`TransientType`] of `T`.
#[doc(hidden)]
pub fn transient_type<'a, T: Error + Transient + 'static>(
    error: &'a (dyn Error + 'static),
) -> Option<&'a dyn Transient> {
    error
        .downcast_ref::<T>()
        .map(|error| error as &dyn Transient)
}

/// resil's own types that can stand in a chain.
const BUILT_IN: &[TransientType] = &[
    transient_type::<Rejected>,
    io_link,
    transient_type::<tokio::time::error::Elapsed>,
    #[cfg(feature = "http")]
    transient_type::<crate::http::HttpError>,
    #[cfg(feature = "reqwest")]
    transient_type::<reqwest::Error>,
];

/// The most links of a chain looked at: a `source()` that loops (an error whose source is
/// itself, or an earlier link) must not spin the attempt's poll for ever; real chains are a
/// handful of links.
const LINKS_AT_MOST: usize = 64;

/// An io error in a chain: it decides by its kind, but for one of kind `Other` around another
/// error, which the walk passes through to what it wraps ([`next`]).
fn io_link<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a dyn Transient> {
    let io = error.downcast_ref::<io::Error>()?;
    (wrapped_by(io).is_none()).then_some(io as &dyn Transient)
}

/// What an io error of kind `Other` wraps (`io::Error::other(e)`): its `source()` is the
/// wrapped error's own source, passing over the wrapped error, which is read through
/// `get_ref` instead.
fn wrapped_by(io: &io::Error) -> Option<&(dyn Error + 'static)> {
    match io.kind() {
        io::ErrorKind::Other => io.get_ref().map(|inner| inner as &(dyn Error + 'static)),
        _ => None,
    }
}

/// The link after `error` in its chain.
fn next<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    match error.downcast_ref::<io::Error>().and_then(wrapped_by) {
        Some(inner) => Some(inner),
        None => error.source(),
    }
}

/// The first error of the chain that a listed type classifies: it decides for the chain.
fn decider<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a dyn Transient> {
    let chain = std::iter::successors(Some(error), |&error| next(error));
    chain.take(LINKS_AT_MOST).find_map(|error| {
        let mut types = BUILT_IN.iter().chain(TRANSIENT_TYPES_0_1.iter());
        types.find_map(|of| of(error))
    })
}

/// A type whose value is (or holds) the first error of a chain.
trait Chain {
    fn first(&self) -> &(dyn Error + 'static);
}

/// `Transient` for [`Chain`] types: as the chain's decider says.
macro_rules! by_chain {
    ($($(#[$attr:meta])* $ty:ty => |$error:ident| $first:expr;)*) => {$(
        $(#[$attr])*
        impl Chain for $ty {
            fn first(&self) -> &(dyn Error + 'static) {
                let $error = self;
                $first
            }
        }

        $(#[$attr])*
        impl Transient for $ty {
            fn is_transient(&self) -> bool {
                decider(self.first()).is_some_and(|error| error.is_transient())
            }
            fn retry_after(&self) -> Option<Duration> {
                decider(self.first()).and_then(|error| error.retry_after())
            }
            fn is_throttle(&self) -> bool {
                decider(self.first()).is_some_and(|error| error.is_throttle())
            }
            fn moves_on(&self) -> bool {
                decider(self.first()).is_some_and(|error| error.moves_on())
            }
        }
    )*};
}

/// Network hiccups are transient: the connection timed out, was reset, aborted or refused,
/// the call was interrupted, would block, or the pipe broke. Every other kind (not found,
/// permission denied, invalid data, ...) is permanent, but for an error of kind `Other` that
/// wraps another (`io::Error::other(e)`, how a program passes its own error through an io
/// interface): what the wrapped error's chain says, as in a boxed error. (Its `source()` is the
/// wrapped error's own source, passing over the wrapped error: it is read through `get_ref`.)
impl Transient for io::Error {
    fn is_transient(&self) -> bool {
        match wrapped(self) {
            Some(error) => error.is_transient(),
            None => matches!(
                self.kind(),
                io::ErrorKind::TimedOut
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::Interrupted
                    | io::ErrorKind::WouldBlock
                    | io::ErrorKind::BrokenPipe
            ),
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        wrapped(self).and_then(|error| error.retry_after())
    }
    fn is_throttle(&self) -> bool {
        wrapped(self).is_some_and(|error| error.is_throttle())
    }
    fn moves_on(&self) -> bool {
        wrapped(self).is_some_and(|error| error.moves_on())
    }
}

/// What decides for an io error of kind `Other` around another error: that error's chain,
/// walked within the same bound as any (the walk passes through such io errors, so this is
/// one walk, however they nest).
fn wrapped(error: &io::Error) -> Option<&dyn Transient> {
    decider(wrapped_by(error)?)
}

by_chain! {
    /// What the first error of its `source()` chain that resil can classify says (resil's own
    /// errors, `std::io::Error`, tokio's `Elapsed`, `HttpError` and `reqwest::Error` with their
    /// features, and every type of the program that derives `Transient`); permanent when none
    /// does. So is `Box<dyn Error + Send + Sync>`.
    dyn Error + Send + Sync + 'static => |error| error;
    /// As `dyn Error + Send + Sync`.
    dyn Error + Send + 'static => |error| error;
    /// As `dyn Error + Send + Sync`.
    dyn Error + 'static => |error| error;
    /// As `dyn Error + Send + Sync`: the first error of its chain that resil can classify
    /// decides, `context()` layers passed over, whatever the context's type (anyhow keeps it
    /// in a layer of its own type: a typed error given as the context is read as a message;
    /// give it as the error, with the context around it). An `anyhow::Error` made from a boxed
    /// error (`anyhow!(boxed)`, `anyhow::Error::from_boxed`, how a tower or tonic `BoxError`
    /// comes in) says what the box says. The caller still finds its own error with
    /// `downcast_ref`, and a [`Rejected`](crate::Rejected) (a timeout, an open breaker) the same way.
    #[cfg(feature = "anyhow")]
    #[cfg_attr(docsrs, doc(cfg(feature = "anyhow")))]
    anyhow::Error => |error| boxed_in(error).unwrap_or(error.as_ref());
}

/// The boxed error an `anyhow::Error` was made from, if it was: anyhow keeps it in a wrapper
/// of its own whose `source()` passes over the boxed error, so a walk from `as_ref()` never
/// saw it (an io reset from a `BoxError` was permanent).
#[cfg(feature = "anyhow")]
fn boxed_in(error: &anyhow::Error) -> Option<&(dyn Error + 'static)> {
    let boxed = error.downcast_ref::<Box<dyn Error + Send + Sync>>()?;
    Some(&**boxed)
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::io;

    use super::*;

    /// An error of no listed type, with an optional cause.
    #[derive(Debug)]
    struct Wrapped(Option<Box<dyn Error + Send + Sync>>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("wrapped")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.0
                .as_deref()
                .map(|error| error as &(dyn Error + 'static))
        }
    }

    fn boxed(error: impl Error + Send + Sync + 'static) -> Box<dyn Error + Send + Sync> {
        Box::new(error)
    }

    #[test]
    fn the_first_error_a_type_classifies_decides() {
        let reset = boxed(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(reset.is_transient());
        let under = boxed(Wrapped(Some(boxed(Wrapped(Some(reset))))));
        assert!(under.is_transient(), "found two links down");
        // The io error is first: its `NotFound` decides, whatever its own cause says.
        let not_found = io::Error::new(io::ErrorKind::NotFound, Wrapped(None));
        let over = boxed(Wrapped(Some(boxed(not_found))));
        assert!(!over.is_transient());
    }

    #[test]
    fn io_kinds() {
        for kind in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::Interrupted,
            io::ErrorKind::WouldBlock,
            io::ErrorKind::BrokenPipe,
        ] {
            assert!(io::Error::from(kind).is_transient(), "{kind:?}");
        }
        for kind in [
            io::ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::InvalidData,
            io::ErrorKind::InvalidInput,
            io::ErrorKind::Other,
        ] {
            assert!(!io::Error::from(kind).is_transient(), "{kind:?}");
        }
    }

    #[test]
    fn an_io_error_of_kind_other_says_what_it_wraps() {
        let open = || Rejected::BreakerOpen {
            breaker: "gpt".into(),
            retry_in: Duration::from_secs(9),
        };
        let other = io::Error::other(open());
        assert_eq!(other.retry_after(), Some(Duration::from_secs(9)));
        let timeout = Rejected::Timeout {
            after: Duration::from_secs(1),
        };
        // Alone, in a box, and under a link of no listed type.
        assert!(io::Error::other(timeout).is_transient());
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        let boxed_other = boxed(io::Error::other(Wrapped(Some(boxed(reset)))));
        assert!(boxed_other.is_transient(), "the wrapped chain decides");
        let under = boxed(Wrapped(Some(boxed(io::Error::other(open())))));
        assert_eq!(under.retry_after(), Some(Duration::from_secs(9)));
        // Another kind decides by itself, and `Other` around nothing listed is permanent.
        assert!(!io::Error::new(io::ErrorKind::NotFound, open()).is_transient());
        assert_eq!(
            io::Error::new(io::ErrorKind::NotFound, open()).retry_after(),
            None
        );
        assert!(!io::Error::other(Wrapped(None)).is_transient());
        assert!(!io::Error::other("no such model").is_transient());
    }

    #[test]
    fn a_chain_nothing_classifies_is_permanent() {
        let plain = boxed(Wrapped(Some(boxed(Wrapped(None)))));
        assert!(!plain.is_transient());
        assert_eq!(plain.retry_after(), None);
        let message: Box<dyn Error + Send + Sync> = "no such model".into();
        assert!(!message.is_transient());
    }

    /// An error that is its own source: a chain that never ends.
    #[derive(Debug)]
    struct Looping;

    impl fmt::Display for Looping {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("looping")
        }
    }

    impl Error for Looping {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(self)
        }
    }

    /// An error whose source is an io error of kind `Other` around the first again.
    #[derive(Debug)]
    struct ThroughIo;

    static AROUND: std::sync::LazyLock<io::Error> =
        std::sync::LazyLock::new(|| io::Error::other(ThroughIo));

    impl fmt::Display for ThroughIo {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("through io")
        }
    }

    impl Error for ThroughIo {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*AROUND)
        }
    }

    #[test]
    fn a_chain_that_loops_through_an_io_error_is_walked_a_bounded_number_of_links() {
        assert!(!AROUND.is_transient(), "permanent, and it returns");
        assert_eq!(boxed(ThroughIo).retry_after(), None);
    }

    #[test]
    fn a_chain_that_loops_is_walked_a_bounded_number_of_links() {
        let looping = boxed(Wrapped(Some(boxed(Looping))));
        assert!(!looping.is_transient(), "permanent, and it returns");
        assert_eq!(looping.retry_after(), None);
    }

    #[test]
    fn the_decider_says_its_wait_throttle_and_move_on() {
        let open = Rejected::BreakerOpen {
            breaker: "gpt".into(),
            retry_in: Duration::from_secs(9),
        };
        let error = boxed(Wrapped(Some(boxed(open))));
        assert!(!error.is_transient());
        assert_eq!(error.retry_after(), Some(Duration::from_secs(9)));
        assert!(!error.is_throttle());
        assert!(!error.moves_on());
        // Each kind of box says the same.
        let timeout = || Rejected::Timeout {
            after: Duration::from_secs(1),
        };
        let sendable: Box<dyn Error + Send> = Box::new(Wrapped(Some(boxed(timeout()))));
        let local: Box<dyn Error> = Box::new(timeout());
        assert!(sendable.is_transient());
        assert!(local.is_transient());
    }

    #[cfg(feature = "http")]
    #[test]
    fn an_http_error_keeps_its_throttle_and_wait() {
        let throttled = crate::http::HttpError {
            status: ::http::StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(Duration::from_secs(3)),
            body: String::new(),
        };
        let error = boxed(Wrapped(Some(boxed(throttled))));
        assert!(error.is_transient() && error.is_throttle());
        assert_eq!(error.retry_after(), Some(Duration::from_secs(3)));
    }

    #[cfg(feature = "anyhow")]
    #[test]
    fn anyhow_passes_over_its_context() {
        use anyhow::Context;
        let reset: Result<(), io::Error> = Err(io::ErrorKind::ConnectionReset.into());
        let error = reset
            .context("reading the answer")
            .context("calling gpt")
            .unwrap_err();
        assert!(error.is_transient());
        assert!(!anyhow::anyhow!("no such model").is_transient());
        let timeout = anyhow::Error::from(Rejected::Timeout {
            after: Duration::from_secs(1),
        });
        assert!(timeout.is_transient());
        assert!(matches!(
            timeout.downcast_ref::<Rejected>(),
            Some(Rejected::Timeout { .. })
        ));
    }
}
