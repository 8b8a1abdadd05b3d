//! [`Listed`]: what a store lists by name, so that what peers publish under a name reaches
//! this process's breakers and gates of that name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::sync::lock_std;

/// What a store lists by name, each entry held weakly: several may share a name.
pub(super) struct Listed<T>(Mutex<HashMap<Arc<str>, Vec<Weak<T>>>>);

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed(Mutex::new(HashMap::new()))
    }
}

impl<T> Listed<T> {
    pub(super) fn list(&self, name: &Arc<str>, entry: &Arc<T>) {
        let mut listed = lock_std(&self.0);
        if listed.len() % 256 == 255 {
            listed.retain(|_, entries| {
                entries.retain(|entry| entry.strong_count() > 0);
                !entries.is_empty()
            });
        }
        let entries = listed.entry(Arc::clone(name)).or_default();
        entries.retain(|entry| entry.strong_count() > 0);
        entries.push(Arc::downgrade(entry));
    }

    pub(super) fn named(&self, name: &str) -> Vec<Arc<T>> {
        let listed = lock_std(&self.0);
        let entries = listed.get(name).map_or(&[][..], Vec::as_slice);
        entries.iter().filter_map(Weak::upgrade).collect()
    }

    pub(super) fn all(&self) -> Vec<Arc<T>> {
        let listed = lock_std(&self.0);
        listed
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .collect()
    }
}
