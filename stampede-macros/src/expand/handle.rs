//! The handle constant beside the function (`LOAD_PROFILE` for `load_profile`): its
//! cache's `invalidate`, `insert` and `stats`, from outside the function.
use super::cache::CacheSite;
use super::key;
use super::types::{private, Types};
use crate::plan::{Mode, Plan};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Signature, Visibility};

/// The constant; none for a generic function, whose instantiations are separate caches
/// one constant outside it cannot tell apart, nor in an `impl Trait for T`, which cannot
/// take an associated constant the trait does not declare.
pub(super) fn handle_const(
    plan: &Plan,
    vis: &Visibility,
    sig: &Signature,
    types: &Types,
    cache: &CacheSite,
) -> TokenStream {
    if is_generic(sig) || plan.trait_impl {
        return TokenStream::new();
    }
    let private = private();
    let fn_name = &sig.ident;
    let fn_text = fn_name.to_string();
    let handle = format_ident!(
        "{}",
        fn_text.trim_start_matches("r#").to_uppercase(),
        span = fn_name.span()
    );
    let doc = handle_doc(plan, &fn_text);
    let Types {
        key: key_ty,
        value: value_ty,
        cache_error: cache_error_ty,
        ..
    } = types;
    let (key_of_ty, key_of) = key::key_builder(plan, key_ty);
    let handle_site = cache.handle(quote!(|| ::core::any::type_name_of_val(&|| ())), &key_of);
    quote! {
        #[doc = #doc]
        // The handle is for the function's callers to use (invalidate, stats): a crate that
        // never does must not be warned about it.
        #[allow(dead_code)]
        #vis const #handle: #private::Handle<#key_ty, #value_ty, #cache_error_ty, #key_of_ty> = #handle_site;
    }
}

fn handle_doc(plan: &Plan, fn_text: &str) -> String {
    let mode_doc = match plan.mode {
        _ if plan.sync => "blocking: a plain `fn`, whose callers are threads; the origin runs in the leading thread, a thread that finds a load running blocks until it settles, and one takes over if the leader panics",
        Mode::Detached => "detached: every argument is owned or cloned for the origin, so the origin outlives its callers and a caller that gives up never cancels a load others wait for",
        Mode::Inline => "inline with takeover: an argument borrows, so the origin runs in the leading caller and a waiter takes over if that caller goes away",
    };
    format!(
        " The cache of [`{fn_text}`]: `invalidate(&key).await`, `invalidate_args((arg, ...)).await`, `insert(&key, value).await`, `invalidate_all().await`, `invalidate_tag(tag).await`, `stats()`.\n\n Leader mode: {mode_doc}."
    )
}

/// Whether the function has type or const parameters (lifetimes do not make instances).
fn is_generic(sig: &Signature) -> bool {
    sig.generics.type_params().next().is_some() || sig.generics.const_params().next().is_some()
}
