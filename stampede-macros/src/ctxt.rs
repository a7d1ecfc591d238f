//! The error collector of one attribute: every stage pushes its mistakes here, each under
//! the token at fault, and they are reported together.
use proc_macro2::Span;
use quote::ToTokens;
use std::fmt::Display;

/// Errors of one attribute, reported together. Like serde's, it panics when dropped
/// before [`Ctxt::finish`], so no stage's errors can be lost.
pub(crate) struct Ctxt {
    /// `None` once finished.
    errors: Option<Vec<syn::Error>>,
}

impl Ctxt {
    pub(crate) fn new() -> Ctxt {
        Ctxt {
            errors: Some(Vec::new()),
        }
    }

    /// An error spanning `tokens` (all of them where the compiler can join spans).
    pub(crate) fn error(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    pub(crate) fn error_at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors
            .as_mut()
            .expect("errors pushed after Ctxt::finish")
            .push(error);
    }

    /// Every error so far, combined in the order pushed.
    pub(crate) fn finish(mut self) -> Result<(), syn::Error> {
        let errors = self.errors.take().expect("Ctxt::finish called twice");
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(mut first) => {
                errors.for_each(|e| first.combine(e));
                Err(first)
            }
        }
    }
}

impl Drop for Ctxt {
    fn drop(&mut self) {
        // Already unwinding: a second panic would abort and hide the first.
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("Ctxt dropped without finish(): its errors would be lost");
        }
    }
}

#[cfg(test)]
mod tests;
