//! A call's key, borrowed for the lookup of its state.

use resil_runtime::{Execution, Keyed, Policy};

/// A key expression's value, borrowed for the lookup. A reference to a key (`self.name()`,
/// `req.model()` returning `&str`) is looked up as the key it points to ([`KeyByDeref`]),
/// anything else as it is ([`KeyByValue`]): a key borrowed from the call need not be
/// `'static`, which `Key` asks of a reference type. Which one applies is decided by method
/// resolution (by value first, then by reference), on the expression's concrete type.
pub struct KeyProbe<'a, X: ?Sized>(pub &'a X);

impl<X: ?Sized> std::fmt::Debug for KeyProbe<'_, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyProbe").finish_non_exhaustive()
    }
}

/// A reference to a key, looked up as the key it points to.
pub trait KeyByDeref<'a> {
    /// The key pointed to.
    type Key: ?Sized;
    /// The key, borrowed.
    fn resil_key(self) -> &'a Self::Key;
}

impl<'a, 'b: 'a, T: resil_runtime::Key + ?Sized> KeyByDeref<'a> for KeyProbe<'a, &'b T> {
    type Key = T;
    fn resil_key(self) -> &'a T {
        self.0
    }
}

/// Any other value, looked up as it is (one that is no key is reported by `keyed_execution`).
pub trait KeyByValue<'a> {
    /// The value.
    type Key: ?Sized;
    /// The value, borrowed.
    fn resil_key(self) -> &'a Self::Key;
}

impl<'a, X: ?Sized> KeyByValue<'a> for &KeyProbe<'a, X> {
    type Key = X;
    fn resil_key(self) -> &'a X {
        self.0
    }
}

/// Starts an operation of `policy` on the state of `key`. A key expression of the wrong type
/// is reported here, by this name, rather than inside the runtime.
#[inline]
pub fn keyed_execution<'p, Q, E>(policy: &'p Policy<Keyed>, key: &Q) -> Execution<'p, E>
where
    Q: resil_runtime::Key + ?Sized,
{
    policy.execute_keyed(key)
}
