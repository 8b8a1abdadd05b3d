//! [`OperationId`]: the name of one call of a logical operation, which events, headers and
//! logs carry as plain data.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The path of a nested call below the operation: `[2, 1]` for the first call started by the
/// second call of the outermost one. Inline up to six levels; deeper ones are rare enough to
/// allocate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Path {
    Inline(u8, [u32; 6]),
    Deep(Arc<[u32]>),
}

impl Path {
    pub(crate) const ROOT: Path = Path::Inline(0, [0; 6]);

    pub(crate) fn parts(&self) -> &[u32] {
        match self {
            Path::Inline(len, parts) => &parts[..usize::from(*len)],
            Path::Deep(parts) => parts,
        }
    }

    /// Whether `child` is the path of a call this path's call started. Inline, a path's
    /// steps past its length are zeros (as [`Path::child`] leaves them): two arrays compared.
    pub(crate) fn is_parent_of(&self, child: &Path) -> bool {
        match (self, child) {
            (Path::Inline(len, parts), Path::Inline(child_len, child_parts)) => {
                let mut above = *child_parts;
                if let Some(last) = above.get_mut(usize::from(*len)) {
                    *last = 0;
                }
                *child_len == len + 1 && above == *parts
            }
            _ => child
                .parts()
                .split_last()
                .is_some_and(|(_, above)| above == self.parts()),
        }
    }

    pub(crate) fn child(&self, n: u32) -> Path {
        match self {
            Path::Inline(len, parts) if usize::from(*len) < parts.len() => {
                let mut parts = *parts;
                parts[usize::from(*len)] = n;
                Path::Inline(len + 1, parts)
            }
            _ => Path::Deep(self.parts().iter().copied().chain([n]).collect()),
        }
    }
}

/// The id of one call of a logical operation: the same for all its attempts, different for
/// every operation of the process (and, through a random prefix, of other processes), and for
/// every nested call inside one. Use it as an `Idempotency-Key`: a retried request carries the
/// same key, so the provider replays it instead of processing it twice.
///
/// The outermost call has the operation's id; the n-th nested call started by an attempt of
/// its parent has `{parent id}.{n}`, so two different charges inside one operation have
/// different keys, and a retried parent re-derives the same key for the same charge.
///
/// ```
/// use resil_runtime::{Operation, Policy, Rejected};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let policy = Policy::builder().retry(2).build().unwrap();
/// let keys = std::sync::Mutex::new(Vec::new());
/// let _: Result<(), Rejected> = policy
///     .run(|| async {
///         keys.lock().unwrap().push(Operation::current().unwrap().id().to_string());
///         Err(Rejected::Timeout { after: std::time::Duration::from_secs(1) })
///     })
///     .await;
/// let keys = keys.into_inner().unwrap();
/// assert_eq!(keys.len(), 3);
/// assert!(keys.iter().all(|key| *key == keys[0]));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId {
    process: u64,
    pub(crate) sequence: u64,
    pub(crate) path: Path,
}

impl OperationId {
    pub(crate) fn next_sequence() -> u64 {
        static SEQUENCE: AtomicU64 = AtomicU64::new(1);
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn new(sequence: u64, path: Path) -> Self {
        static PROCESS: OnceLock<u64> = OnceLock::new();
        OperationId {
            // Not `rand::random`: its thread-local panics in a thread-local's destructor.
            process: *PROCESS.get_or_init(|| SmallRng::from_os_rng().random()),
            sequence,
            path,
        }
    }

    /// The id of the outermost call: the operation's own.
    pub fn operation(&self) -> OperationId {
        OperationId::new(self.sequence, Path::ROOT)
    }

    /// How deep the call is nested: 0 for the outermost call.
    pub fn depth(&self) -> usize {
        self.path.parts().len()
    }
}

/// 33 characters for the outermost call, safe in an HTTP header:
/// `5f2a9c1e7b3d4a60-0000000000000001`; a nested call appends `.{n}` per level
/// (`5f2a9c1e7b3d4a60-0000000000000001.2.1`).
impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{:016x}", self.process, self.sequence)?;
        for part in self.path.parts() {
            write!(f, ".{part}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Path;

    /// The path of `parts`, made as calls make theirs.
    fn path(parts: &[u32]) -> Path {
        parts.iter().fold(Path::ROOT, |path, &n| path.child(n))
    }

    #[test]
    fn a_path_is_the_parent_of_its_children_only() {
        for depth in 0..9 {
            let parts: Vec<u32> = (1..=depth).collect();
            let parent = path(&parts);
            assert!(parent.is_parent_of(&parent.child(3)), "{parts:?}");
            assert!(!parent.is_parent_of(&parent), "{parts:?}");
            assert!(!parent.is_parent_of(&parent.child(3).child(1)), "{parts:?}");
            if let Some((_, above)) = parts.split_last() {
                let sibling = path(above).child(99);
                assert!(!sibling.is_parent_of(&parent.child(3)), "{parts:?}");
                assert!(!parent.child(3).is_parent_of(&parent), "{parts:?}");
            }
        }
    }
}
