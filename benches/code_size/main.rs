//! Machine code per annotated function: copies of one `#[resilient(..)]` function, written by
//! `build.rs` from `RESIL_CODE_SIZE_ATTRIBUTE` and `RESIL_CODE_SIZE_COPIES`, each called once.
//! `cargo xtask code-size` builds it with one copy and with three and reports half the
//! difference of the binary's code: what one more such function costs, whatever the runtime
//! code every function shares.

use resil::{Rejected, Transient};

/// The functions' error: transient, and a rejection converts into it.
#[derive(Debug, thiserror::Error, Transient)]
enum Failure {
    #[error("busy")]
    #[transient]
    Busy,
    #[error(transparent)]
    #[transient(transparent)]
    Rejected(#[from] Rejected),
}

include!(concat!(env!("OUT_DIR"), "/code_size_copies.rs"));

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::hint::black_box(false) {
        std::hint::black_box(Failure::Busy);
    }
    call_every_copy().await;
}
