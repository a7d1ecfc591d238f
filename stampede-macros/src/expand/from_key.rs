//! The functions of the key the runtime calls: `tags = ...` (the `fn(&K, &V) -> Vec<String>`
//! each stored entry is tagged with) and `admission_group = ...` (the `fn(&K) -> u64` a load
//! queues by), each giving its expression the keyed arguments it uses back from the key.
use super::types::Types;
use crate::plan::{Key, Plan};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Type;

/// `let tags: Option<fn(&K, &V) -> Vec<String>> = ...;`, for the cache's build. Each
/// argument the expression uses is bound to its part of the key: `&T` for an owned `T`,
/// `&T` again for a borrowed `&T` (through the owned form's `Borrow`), and `&T` for a
/// `batch` argument of `T`s (the entry's own element). The tags are collected inside, so nothing borrows the key
/// once they are made.
pub(super) fn tags_fn(plan: &Plan, types: &Types) -> TokenStream {
    let Types {
        key: key_ty,
        value: value_ty,
        ..
    } = types;
    let fn_ty = quote! {
        fn(&#key_ty, &#value_ty) -> ::std::vec::Vec<::std::string::String>
    };
    let Some(tags) = &plan.tags else {
        return quote! {
            let tags: ::core::option::Option<#fn_ty> = ::core::option::Option::None;
        };
    };
    let bindings = key_bindings(plan, &tags.uses);
    let expr = &tags.expr;
    let collect = quote_spanned! {expr.span()=>
        ::core::iter::Iterator::collect(::core::iter::Iterator::map(
            ::core::iter::IntoIterator::into_iter(#expr),
            |__stampede_tag| ::std::borrow::ToOwned::to_owned(::core::convert::AsRef::<str>::as_ref(&__stampede_tag)),
        ))
    };
    quote! {
        let tags: #fn_ty = |__stampede_key, _| {
            #(#bindings)*
            #collect
        };
        let tags = ::core::option::Option::Some(tags);
    }
}

/// Each argument in `uses` bound to its part of the key (`__stampede_key`): `&T` for an
/// owned `T`, `&T` again for a borrowed `&T` (through the owned form's `Borrow`), and `&T`
/// for a `batch` argument of `T`s (the entry's own element).
fn key_bindings(plan: &Plan, uses: &[usize]) -> Vec<TokenStream> {
    let parts: &[usize] = match &plan.key {
        Key::Params(parts) => parts,
        // The check let through only expressions that use no argument.
        Key::Expr { .. } => &[],
    };
    uses.iter()
        .map(|&i| {
            let param = &plan.params[i];
            let name = param.ident();
            let position = parts.iter().position(|&p| p == i).unwrap_or_default();
            let part = if parts.len() == 1 {
                quote!(__stampede_key)
            } else {
                let index = syn::Index::from(position);
                quote!(&__stampede_key.#index)
            };
            let (ty, value) = match (&plan.batch, &param.ty) {
                (Some(batch), _) if batch.param == i => (&batch.element, part),
                (_, Type::Reference(reference)) => {
                    let target = &*reference.elem;
                    (
                        target,
                        quote!(::core::borrow::Borrow::<#target>::borrow(#part)),
                    )
                }
                (_, ty) => (ty, part),
            };
            // A name read out of a macro's tokens may not be a use after all.
            quote! {
                #[allow(unused_variables)]
                let #name: &#ty = #value;
            }
        })
        .collect()
}

/// `let admission_group: Option<fn(&K) -> u64> = ...;`, for the cache's build: the
/// expression evaluated with the keyed arguments it uses read back from the key, hashed
/// as `CacheBuilder::admission_group` hashes.
pub(super) fn admission_group_fn(plan: &Plan, types: &Types) -> TokenStream {
    let private = super::types::private();
    let key_ty = &types.key;
    let fn_ty = quote!(fn(&#key_ty) -> u64);
    let Some(group) = &plan.admission_group else {
        return quote! {
            let admission_group: ::core::option::Option<#fn_ty> = ::core::option::Option::None;
        };
    };
    let bindings = key_bindings(plan, &group.uses);
    let expr = &group.expr;
    let hash = quote_spanned!(expr.span()=> #private::group_hash(&(#expr)));
    quote! {
        let admission_group: #fn_ty = |__stampede_key| {
            #(#bindings)*
            #hash
        };
        let admission_group = ::core::option::Option::Some(admission_group);
    }
}
