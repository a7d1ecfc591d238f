//! Code generation: the function keeps its signature, attributes and body; its body now
//! builds the key, finds the function's cache and loads through it. Beside it, a handle
//! constant (`LOAD_PROFILE` for `load_profile`). Generated code reaches the runtime only
//! through `::stampede::__private`.
use crate::plan::Plan;
use cache::CacheSite;
use proc_macro2::TokenStream;
use quote::quote;
use syn::{Block, ItemFn};
use types::{private, trait_imports, Types};

mod batch;
mod cache;
mod call;
mod from_key;
mod handle;
mod key;
mod types;

pub(crate) fn expand(plan: Plan, func: ItemFn) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = &func;
    let sig = &key::outer_signature(sig, &plan);
    let types = Types::of(&plan);
    let cache = CacheSite::new(&plan, &sig.ident, &types);
    let body = body(&plan, &types, &cache, block);
    let handle = handle::handle_const(&plan, vis, sig, &types, &cache);
    let single = match &plan.batch {
        Some(batch) => batch::single_fn(&plan, batch, vis, sig),
        None => TokenStream::new(),
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #body
        }

        #handle
        #single
    }
}

/// The function's new body: the call's mode, the type assertions, the key, this
/// instantiation's cache, and the call through it.
fn body(plan: &Plan, types: &Types, cache: &CacheSite, block: &Block) -> TokenStream {
    let private = private();
    let Types {
        key: key_ty,
        cache: cache_ty,
        asserted,
        ..
    } = types;
    let assertions = types::assertions(plan, types);
    let uses = trait_imports();
    let body_site = cache.handle(quote!(|| ""), &quote!(#private::ExpressionKey::new()));
    // A batch builds a key per element in its call.
    let (key, call) = match &plan.batch {
        Some(batch) => (TokenStream::new(), batch::call(plan, batch, types, block)),
        None => {
            let key_value = key::key_value(plan);
            let key = quote!(let __stampede_key: #key_ty = #key_value;);
            (key, call::call(plan, types, block))
        }
    };
    quote! {
        // First, before any other cached call can: this call's `bypass` or `refresh`.
        let __stampede_mode = #private::take_call_mode();
        #assertions
        #key
        // The instantiation this call runs in (a generic `impl` makes several): the type
        // of a closure written here, by its name (which the handle can match) and its
        // type id (which tells apart instantiations whose names print alike).
        let __stampede_probe = || ();
        let __stampede_id = #private::type_id_of_val(&__stampede_probe);
        static __STAMPEDE_CACHES: #private::Instances<#cache_ty> = #private::Instances::new();
        #uses
        let __stampede_other;
        let __stampede_cache = match __STAMPEDE_CACHES.first(__stampede_id) {
            ::core::option::Option::Some(cache) => cache,
            ::core::option::Option::None => {
                let __stampede_here: &'static str = ::core::any::type_name_of_val(&__stampede_probe);
                __stampede_other = __STAMPEDE_CACHES.resolve(
                    __stampede_here,
                    __stampede_id,
                    || #asserted.cache_at(&#body_site, __stampede_here),
                    || #asserted.uncached_at(&#body_site, __stampede_here),
                );
                &__stampede_other
            }
        };
        #call
    }
}
