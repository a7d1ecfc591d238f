//! How the leader runs the origin: so that it may outlive its callers (detached) where no
//! argument borrows, else in the leading caller only (inline).
use crate::args::{LoadMode, Set};
use crate::ctxt::Ctxt;
use crate::plan::{Mode, Param};
use proc_macro2::Span;
use std::collections::BTreeSet;
use syn::visit::Visit;
use syn::{Receiver, Signature};

/// Detached when nothing borrows: no receiver, no reference, lifetime, `impl Trait` or
/// generic type parameter in any argument; `mode = …` chooses explicitly, and detached is
/// refused where an argument borrows (a task of its own cannot hold a borrow).
pub(super) fn leader_mode(
    sig: &Signature,
    receiver: Option<&Receiver>,
    params: &[Param],
    clone_listed: &BTreeSet<String>,
    declared: Option<&Set<LoadMode>>,
    cx: &mut Ctxt,
) -> Mode {
    let (borrowing, generic) = borrowing_arguments(sig, receiver, params, clone_listed);
    match declared.map(|d| d.value) {
        Some(LoadMode::Inline) => Mode::Inline,
        Some(LoadMode::Detached) => {
            for (span, arg) in &borrowing {
                cx.error_at(
                    *span,
                    format!("`mode = detached` lets the origin outlive this call (it goes on as a task of its own when the caller stops waiting), so it cannot hold the borrowed `{arg}`: write `clone({arg})` if it is cheap to clone (a pool, a client, an `Arc`), pass it owned, or drop `mode = detached`"),
                );
            }
            Mode::Detached
        }
        None if borrowing.is_empty() && !generic => Mode::Detached,
        None => Mode::Inline,
    }
}

/// A batch function's origin is called for chunks of keys, outliving the call: nothing
/// it runs on may borrow. `keys` (the batch argument) is read before, never borrowed.
pub(super) fn batch_mode(
    sig: &Signature,
    receiver: Option<&Receiver>,
    params: &[Param],
    clone_listed: &BTreeSet<String>,
    keys: &str,
    cx: &mut Ctxt,
) -> Mode {
    let mut owned = clone_listed.clone();
    owned.insert(keys.to_owned());
    let (borrowing, _) = borrowing_arguments(sig, receiver, params, &owned);
    for (span, arg) in &borrowing {
        cx.error_at(
            *span,
            format!("a `batch` function's origin outlives the call (its keys may be asked for together with other calls' keys), so it cannot hold the borrowed `{arg}`: write `clone({arg})` if it is cheap to clone (a pool, a client, an `Arc`), or pass it owned"),
        );
    }
    Mode::Detached
}

/// The arguments (and `self`) the origin would borrow unless cloned, each with its span;
/// and whether any argument's type is generic, which may borrow.
fn borrowing_arguments(
    sig: &Signature,
    receiver: Option<&Receiver>,
    params: &[Param],
    clone_listed: &BTreeSet<String>,
) -> (Vec<(Span, String)>, bool) {
    let generics: BTreeSet<String> = sig
        .generics
        .type_params()
        .map(|t| t.ident.to_string())
        .collect();
    let mut borrowing: Vec<(Span, String)> = Vec::new();
    let mut generic = false;
    if let Some(receiver) = receiver.filter(|_| !clone_listed.contains("self")) {
        borrowing.push((receiver.self_token.span, "self".to_owned()));
    }
    for param in params {
        if clone_listed.contains(&param.ident().to_string()) {
            continue;
        }
        let mut borrows = Borrows {
            generics: &generics,
            borrows: false,
            generic: false,
        };
        borrows.visit_type(&param.ty);
        if borrows.borrows {
            borrowing.push((param.ident().span(), param.ident().to_string()));
        }
        generic |= borrows.generic;
    }
    (borrowing, generic)
}

/// What one argument's type holds.
struct Borrows<'a> {
    /// The function's type parameters.
    generics: &'a BTreeSet<String>,
    /// A borrow the origin's own task could not hold.
    borrows: bool,
    /// A generic type, which may or may not borrow.
    generic: bool,
}

impl<'ast> Visit<'ast> for Borrows<'_> {
    fn visit_type_reference(&mut self, _: &'ast syn::TypeReference) {
        self.borrows = true;
    }

    fn visit_lifetime(&mut self, _: &'ast syn::Lifetime) {
        self.borrows = true;
    }

    fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
        self.generic = true;
    }

    fn visit_type_path(&mut self, path: &'ast syn::TypePath) {
        if let Some(ident) = path.path.get_ident()
            && self.generics.contains(&ident.to_string())
        {
            self.generic = true;
        }
        syn::visit::visit_type_path(self, path);
    }
}
