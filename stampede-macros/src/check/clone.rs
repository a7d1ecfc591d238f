//! `clone(...)`: borrowed arguments (or `self`) the origin runs on an owned clone of, so
//! it can outlive the call (as a task of its own once the caller stops waiting).
use super::signature;
use crate::args::Args;
use crate::ctxt::Ctxt;
use crate::plan::{Cloned, Param};
use std::collections::BTreeSet;
use syn::{Ident, Receiver, ReceiverKind, Type};

/// The clones, and every known name the option lists (listed for in the key check even
/// when its clone is refused, so one mistake is one error).
pub(super) fn check_clones(
    args: &Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    cx: &mut Ctxt,
) -> (Vec<Cloned>, BTreeSet<String>) {
    let mut cloned = Vec::new();
    let mut listed = BTreeSet::new();
    for written in args.clone.iter().flat_map(|s| s.value.iter()) {
        let text = written.to_string();
        let target = if text == "self" {
            receiver.map(|r| (receiver_type(r), true))
        } else {
            params
                .iter()
                .find(|p| p.ident() == written)
                .map(|p| (p.ty.clone(), false))
        };
        let Some((ty, is_self)) = target else {
            signature::not_an_argument(written, receiver, params, cx);
            continue;
        };
        if !listed.insert(text) {
            cx.error(written, format!("`{written}` is cloned twice"));
            continue;
        }
        cloned.extend(check_clone(written, &ty, is_self, cx));
    }
    (cloned, listed)
}

/// A clone of a shared borrow (or of `self`, however it is taken); `None` for one the
/// origin could not use in place of the argument.
fn check_clone(written: &Ident, ty: &Type, is_self: bool, cx: &mut Ctxt) -> Option<Cloned> {
    let by_ref = match ty {
        Type::Reference(r) if r.mutability.is_some() => {
            // `&mut self` is refused on its own, under the receiver.
            if !is_self {
                cx.error(
                    written,
                    format!("`{written}` is `&mut`: the origin would change a clone, not the caller's value; `clone` takes shared borrows (`&T`)"),
                );
            }
            return None;
        }
        Type::Reference(_) => true,
        _ if is_self => false,
        _ => {
            cx.error(
                written,
                format!("`{written}` is owned already, so the origin can take it as it is: `clone` is for borrowed arguments (`{written}: &T`) and `self`"),
            );
            return None;
        }
    };
    Some(Cloned {
        written: written.clone(),
        by_ref,
        is_self,
    })
}

/// The type of a receiver as written out: `&Self` for `&self`, `Self` for `self`.
fn receiver_type(receiver: &Receiver) -> Type {
    match &receiver.kind {
        ReceiverKind::Reference(_, _, None) => syn::parse_quote!(&Self),
        ReceiverKind::Reference(_, _, Some(_)) => syn::parse_quote!(&mut Self),
        ReceiverKind::Typed(_, ty) => (**ty).clone(),
        _ => syn::parse_quote!(Self),
    }
}
