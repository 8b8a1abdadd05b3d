//! Bounded lists of what a link or a store keeps of a schedule while it cannot pass it on:
//! full, they let go of what ends soonest.

/// Adds the stretch of slots `(from, end)` to `stretches`, joined to those it adjoins; when
/// `kept` are kept, the one that ends soonest goes (it holds a schedule back least, and passes
/// first), unless it is this one.
pub(crate) fn keep_stretch(stretches: &mut Vec<(u64, u64)>, (from, end): (u64, u64), kept: usize) {
    let before = stretches.iter().position(|&(_, kept)| kept == from);
    let after = stretches.iter().position(|&(kept, _)| kept == end);
    match (before, after) {
        (Some(before), Some(after)) => {
            stretches[before].1 = stretches[after].1;
            stretches.swap_remove(after);
        }
        (Some(before), None) => stretches[before].1 = end,
        (None, Some(after)) => stretches[after].0 = from,
        (None, None) => {
            if room_for(stretches, end, kept, |&(_, end)| end) {
                stretches.push((from, end));
            }
        }
    }
}

/// Whether `entries` have room for one more that ends at `end`, `kept` at most: when full, the
/// one that ends soonest (by `end_of`) goes, since it holds a schedule back least and passes
/// first, unless the new one ends sooner still (no room).
pub(super) fn room_for<T>(
    entries: &mut Vec<T>,
    end: u64,
    kept: usize,
    end_of: impl Fn(&T) -> u64,
) -> bool {
    if entries.len() < kept {
        return true;
    }
    let soonest = (0..entries.len()).min_by_key(|&at| end_of(&entries[at]));
    match soonest.filter(|&at| end_of(&entries[at]) < end) {
        Some(at) => {
            entries.swap_remove(at);
            true
        }
        None => false,
    }
}
