//! [`Errors`]: every mistake of one attribute, reported together.

use proc_macro2::Span;

/// Collects every mistake instead of stopping at the first.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        let error = syn::Error::new(span, message);
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Reports a broken rule of the spec at `span`.
    pub(crate) fn check(&mut self, span: Span, rule: Result<(), resil_spec::rules::Violation>) {
        if let Err(violation) = rule {
            self.push(span, violation);
        }
    }

    /// No mistake so far: a rule that a mistaken value would trip too (the value is then
    /// missing) is checked only when this holds, so one mistake is reported once.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn into_result(self) -> Result<(), syn::Error> {
        self.0.map_or(Ok(()), Err)
    }
}
