//! Keyed state within its bounds: no more keys kept than `max_keys`, no more bytes per key
//! than `Keys` documents.

use super::{Checker, Inv};

impl Checker {
    /// After a key's calls: `kept` keys, of at most `most` (the `max_keys` declared, and one
    /// held in use beyond it).
    pub(crate) fn keys_kept(&mut self, kept: usize, most: usize) {
        self.check(Inv::KeyedBytes, kept <= most, None, || {
            format!("{kept} keys kept by a policy whose max_keys is {most}")
        });
    }

    /// After every key's calls: the bytes the policy kept since, per key of the `kept`.
    pub(crate) fn key_bytes(&mut self, per_key: i64, bound: usize, kept: usize) {
        self.log(format!("many keys: {kept} kept, {per_key} bytes each"));
        self.check(Inv::KeyedBytes, per_key <= bound as i64, None, || {
            format!("{kept} keys keep {per_key} bytes each, past the documented {bound}")
        });
    }
}
