//! [`Listed`]: what a store lists by name, so that what peers publish under a name reaches
//! this process's breakers and gates of that name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::seams::{BreakerNews, GateNews};
use crate::sync::lock_std;

/// A handle a store lists: its name, and whether what it reaches is gone.
pub(crate) trait Entry: Clone {
    fn name(&self) -> &Arc<str>;
    fn is_gone(&self) -> bool;
}

impl Entry for BreakerNews {
    fn name(&self) -> &Arc<str> {
        self.shared_name()
    }
    fn is_gone(&self) -> bool {
        BreakerNews::is_gone(self)
    }
}

impl Entry for GateNews {
    fn name(&self) -> &Arc<str> {
        self.shared_name()
    }
    fn is_gone(&self) -> bool {
        GateNews::is_gone(self)
    }
}

/// What a store lists by name, each handle holding its breaker or gate weakly: several may
/// share a name.
pub(crate) struct Listed<T>(Mutex<HashMap<Arc<str>, Vec<T>>>);

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed(Mutex::new(HashMap::new()))
    }
}

impl<T: Entry> Listed<T> {
    pub(crate) fn list(&self, entry: T) {
        let mut listed = lock_std(&self.0);
        if listed.len() % 256 == 255 {
            listed.retain(|_, entries| {
                entries.retain(|entry| !entry.is_gone());
                !entries.is_empty()
            });
        }
        let entries = listed.entry(Arc::clone(entry.name())).or_default();
        entries.retain(|entry| !entry.is_gone());
        entries.push(entry);
    }

    pub(crate) fn named(&self, name: &str) -> Vec<T> {
        let listed = lock_std(&self.0);
        let entries = listed.get(name).map_or(&[][..], Vec::as_slice);
        entries
            .iter()
            .filter(|entry| !entry.is_gone())
            .cloned()
            .collect()
    }

    pub(crate) fn all(&self) -> Vec<T> {
        let listed = lock_std(&self.0);
        listed
            .values()
            .flatten()
            .filter(|entry| !entry.is_gone())
            .cloned()
            .collect()
    }
}
