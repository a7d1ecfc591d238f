//! The signature the cache can hold: no `const` or `unsafe`, arguments with plain names
//! and no `&mut`, and a return value to cache.
use crate::args::Returning;
use crate::ctxt::Ctxt;
use crate::plan::{Param, Returns};
use proc_macro2::Span;
use syn::{
    FnArg, GenericArgument, Ident, Pat, PatType, PathArguments, Receiver, ReceiverKind, ReturnType,
    Signature, Type,
};

pub(super) fn check_qualifiers(sig: &Signature, cx: &mut Ctxt) {
    if let Some(constness) = &sig.constness {
        cx.error(constness, "#[cached] cannot go on a `const fn`");
    }
    if !matches!(sig.safety, syn::Safety::Default) {
        cx.error(
            sig.fn_token,
            "#[cached] cannot go on an `unsafe fn`: the body runs inside a closure",
        );
    }
}

/// The receiver (if any) and the named arguments.
pub(super) fn check_arguments(sig: &Signature, cx: &mut Ctxt) -> (Option<Receiver>, Vec<Param>) {
    let mut receiver = None;
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                check_receiver(r, cx);
                receiver = Some(r.clone());
            }
            FnArg::Typed(typed) => params.extend(check_argument(typed, cx)),
        }
    }
    (receiver, params)
}

fn check_receiver(receiver: &Receiver, cx: &mut Ctxt) {
    if let ReceiverKind::Reference(_, _, Some(mutability)) = &receiver.kind {
        cx.error(
            mutability,
            "a cached method cannot take `&mut self`: on a hit the body does not run, so its changes to `self` would happen only on misses; take `&self`",
        );
    }
}

/// A named argument; `None` for a pattern, which `key` and `skip` could not name.
fn check_argument(typed: &PatType, cx: &mut Ctxt) -> Option<Param> {
    match &*typed.pat {
        Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
            if let Type::Reference(syn::TypeReference {
                mutability: Some(mutability),
                ..
            }) = &*typed.ty
            {
                cx.error(
                    mutability,
                    format!("a cached function cannot take `&mut` arguments: on a hit the body does not run, so its changes to `{}` would happen only on misses; take it by `&` or by value", pat.ident),
                );
            }
            Some(Param {
                pat: pat.clone(),
                by_ref: matches!(&*typed.ty, Type::Reference(_)),
                ty: (*typed.ty).clone(),
            })
        }
        other => {
            cx.error(
                other,
                "give this argument a plain name (`arg: Type`): #[cached] names arguments in `key` and `skip`",
            );
            None
        }
    }
}

/// Whether the function is fallible. A type whose last segment is `Result` (`Result<T, E>`,
/// `io::Result<T>`) or that `returns = result` marks is one; anything else is a plain
/// value. Either reading is confirmed by the compiler (see the `Fallible` bound and the
/// plain-value probe in `expand`), so an alias can never turn errors into cached values.
pub(super) fn check_return_type(
    output: &ReturnType,
    declared: Option<Returning>,
    cx: &mut Ctxt,
) -> Option<Returns> {
    const UNIT: &str = "a cached function must return the value to cache; this one returns `()`";
    let ty = match output {
        ReturnType::Type(_, ty) => (**ty).clone(),
        ReturnType::Default => {
            cx.error_at(Span::call_site(), UNIT);
            return None;
        }
    };
    if matches!(&ty, Type::Tuple(unit) if unit.elems.is_empty()) {
        cx.error(&ty, UNIT);
        return None;
    }
    let last = match &ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    };
    let named_result = last.is_some_and(|last| last.ident == "Result");
    let fallible = match declared {
        Some(Returning::Result) => true,
        Some(Returning::Value) => false,
        None => named_result,
    };
    if !fallible {
        return Some(Returns::Value(ty));
    }
    let types: Vec<&Type> = match last.map(|last| &last.arguments) {
        Some(PathArguments::AngleBracketed(generics)) if named_result => generics
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let projection = |assoc: &str| -> Type {
        let assoc = Ident::new(assoc, Span::call_site());
        syn::parse_quote!(<#ty as ::stampede::__private::Fallible>::#assoc)
    };
    Some(match types.as_slice() {
        [ok, err] => Returns::Result {
            ty: ty.clone(),
            ok: (*ok).clone(),
            err: (*err).clone(),
        },
        // An alias such as `io::Result<T>`: the compiler resolves it.
        _ => Returns::Result {
            ok: projection("Value"),
            err: projection("Error"),
            ty,
        },
    })
}

/// An error under a name in `skip(...)` or `clone(...)` that is no argument, listing the
/// arguments there are.
pub(super) fn not_an_argument(
    written: &Ident,
    receiver: Option<&Receiver>,
    params: &[Param],
    cx: &mut Ctxt,
) {
    let receiver = receiver.map(|_| "`self`".to_owned());
    let params = params.iter().map(|p| format!("`{}`", p.ident()));
    let list: Vec<String> = receiver.into_iter().chain(params).collect();
    cx.error(
        written,
        format!(
            "`{written}` is not an argument of this function (its arguments: {})",
            list.join(", ")
        ),
    );
}
