//! A `batch` function's call: every element of the batch argument is a key of its own
//! (with the other keyed arguments), loaded through `Cache::load_many`, whose origin runs
//! the body for the keys nobody has, with the batch argument rebuilt from them.
use super::call;
use super::key::one_or_tuple;
use super::types::{private, Types};
use crate::plan::{Batch, Collection, Key, Plan, Returns};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Block, Signature, Visibility};

/// `single = price`: a function for one key beside the batch one, taking the element
/// where the batch function takes the collection, and answering its value (`None`: not
/// found). It calls the batch function with one key, in the single-key mode: its key is
/// gathered with the other single keys of the window into one origin call.
pub(super) fn single_fn(
    plan: &Plan,
    batch: &Batch,
    vis: &Visibility,
    sig: &Signature,
) -> TokenStream {
    let Some(single) = &batch.single else {
        return TokenStream::new();
    };
    let private = private();
    let batch_fn = &sig.ident;
    let keys = plan.params[batch.param].ident();
    let text = keys.to_string();
    let element = match text.strip_suffix('s') {
        Some(one) if !one.is_empty() => format_ident!("{}", one, span = keys.span()),
        _ => format_ident!("key", span = keys.span()),
    };
    let element_ty = &batch.element;
    let found_ty = &batch.value;
    let mut inputs = Vec::new();
    let mut args = Vec::new();
    for (i, param) in plan.params.iter().enumerate() {
        let name = param.ident();
        if i == batch.param {
            inputs.push(quote!(#element: #element_ty));
            args.push(match batch.collection {
                Collection::Owned => {
                    quote!(::core::iter::FromIterator::from_iter(::core::iter::once(#element)))
                }
                Collection::Slice => quote!(::core::slice::from_ref(&#element)),
            });
        } else {
            let ty = &param.ty;
            inputs.push(quote!(#name: #ty));
            args.push(quote!(#name));
        }
    }
    let generics = &sig.generics;
    let where_clause = &sig.generics.where_clause;
    let (ret, answer) = match &plan.returns {
        Returns::Result { err, .. } => (
            quote!(::core::result::Result<::core::option::Option<#found_ty>, #err>),
            quote! {
                __stampede_found.map(|__stampede_found| {
                    ::core::iter::Iterator::next(&mut ::core::iter::IntoIterator::into_iter(__stampede_found))
                        .map(|(_, __stampede_value)| __stampede_value)
                })
            },
        ),
        Returns::Value(_) => (
            quote!(::core::option::Option<#found_ty>),
            quote! {
                ::core::iter::Iterator::next(&mut ::core::iter::IntoIterator::into_iter(__stampede_found))
                    .map(|(_, __stampede_value)| __stampede_value)
            },
        ),
    };
    let doc = format!(
        " One key of [`{batch_fn}`]: its value, or `None` where it was not found. Concurrent calls that miss within the batch window go to the origin together, in one call of `{batch_fn}`'s body."
    );
    quote! {
        #[doc = #doc]
        #vis async fn #single #generics(#(#inputs),*) -> #ret #where_clause {
            let __stampede_found = #private::single(#batch_fn(#(#args),*)).await;
            #answer
        }
    }
}

pub(super) fn call(plan: &Plan, batch: &Batch, types: &Types, block: &Block) -> TokenStream {
    let private = private();
    let Types {
        key: key_ty,
        ret: ret_ty,
        ..
    } = types;
    let Key::Params(parts) = &plan.key else {
        unreachable!("`batch` is refused with `key = ...`");
    };
    let keys_param = &plan.params[batch.param];
    let keys_name = keys_param.ident();
    let keys_pat = &keys_param.pat;
    let keys_ty = &keys_param.ty;
    let element_ty = &batch.element;
    let found_ty = &batch.value;
    // The other keyed arguments, in the order of the key, with their place in `rest`.
    let rest: Vec<usize> = parts
        .iter()
        .copied()
        .filter(|&i| i != batch.param)
        .collect();
    let rest_names: Vec<_> = rest.iter().map(|&i| plan.params[i].ident()).collect();
    let restore_rest = rest.iter().enumerate().map(|(position, &i)| {
        let pat = &plan.params[i].pat;
        let index = syn::Index::from(position);
        quote!(let #pat = ::core::clone::Clone::clone(&__stampede_rest.#index);)
    });
    // Owned arguments outside the key (`skip`): each origin call gets a clone.
    let cloned: Vec<String> = plan.cloned.iter().map(|c| c.written.to_string()).collect();
    let skipped: Vec<_> = plan
        .params
        .iter()
        .enumerate()
        .filter(|(i, p)| !parts.contains(i) && !cloned.contains(&p.ident().to_string()))
        .map(|(_, p)| p)
        .collect();
    let skipped_names: Vec<_> = skipped.iter().map(|p| p.ident()).collect();
    let restore_skipped = skipped.iter().enumerate().map(|(position, p)| {
        let pat = &p.pat;
        let index = syn::Index::from(position);
        quote!(let #pat = __stampede_skipped.#index;)
    });
    let (take_clones, give_clones) = call::clones(plan);
    let copy_clones = (0..plan.cloned.len()).map(|i| {
        let var = format_ident!("__stampede_clone_{}", i);
        quote!(let #var = ::core::clone::Clone::clone(&#var);)
    });
    // One element's key, and the element back out of a key.
    let single = parts.len() == 1;
    let key_of = |element: TokenStream| {
        one_or_tuple(parts.iter().map(|&i| {
            if i == batch.param {
                element.clone()
            } else {
                let position = rest.iter().position(|&r| r == i).unwrap_or_default();
                let index = syn::Index::from(position);
                quote!(::core::clone::Clone::clone(&__stampede_rest.#index))
            }
        }))
    };
    let key_of_element = key_of(quote!(__stampede_element));
    let element_of_key = if single {
        quote!(__stampede_key)
    } else {
        let position = parts
            .iter()
            .position(|&i| i == batch.param)
            .unwrap_or_default();
        let index = syn::Index::from(position);
        quote!(__stampede_key.#index)
    };
    let elements = match batch.collection {
        Collection::Owned => quote!(::core::iter::IntoIterator::into_iter(#keys_name)),
        Collection::Slice => {
            quote!(::core::iter::Iterator::cloned(::core::iter::IntoIterator::into_iter(#keys_name)))
        }
    };
    let bind_keys = match batch.collection {
        Collection::Owned => quote! {
            let #keys_pat: #keys_ty = ::core::iter::IntoIterator::into_iter(__stampede_elements).collect();
        },
        Collection::Slice => quote! {
            let #keys_pat: #keys_ty = &__stampede_elements[..];
        },
    };
    let body = call::body(plan, types, block);
    let map_ty = plan.returns.cached();
    let rekey = quote! {
        |__stampede_found: #map_ty| ::core::iter::IntoIterator::into_iter(__stampede_found)
            .map(|(__stampede_element, __stampede_value)| {
                let __stampede_element = __stampede_into_element(__stampede_element);
                (#key_of_element, __stampede_value)
            })
            .collect::<::std::collections::HashMap<#key_ty, #found_ty>>()
    };
    let answer_of_origin = match &plan.returns {
        Returns::Result { .. } => {
            quote!(#private::origin_answer::<#ret_ty>(__stampede_result).map(#rekey))
        }
        Returns::Value(_) => {
            quote!(::core::result::Result::Ok::<_, #private::Error>((#rekey)(__stampede_result)))
        }
    };
    let found = quote! {
        ::core::iter::IntoIterator::into_iter(value)
            .map(|(__stampede_key, __stampede_value)| (__stampede_from_element(#element_of_key), __stampede_value))
            .collect::<#map_ty>()
    };
    let answer = call::callers_answer(plan, types, &quote!(__stampede_loaded), &found);
    // The map's key type is the element type: asked once, under the map's key type.
    let map_key = &batch.key;
    let same_keys = quote_spanned! {map_key.span()=>
        let (__stampede_into_element, __stampede_from_element) =
            #private::batch_keys::<#element_ty, #map_key>();
    };
    quote! {{
        #same_keys
        let __stampede_rest = (#(#rest_names,)*);
        // The other keyed arguments: calls with the same ones share origin calls.
        let __stampede_group = ::core::clone::Clone::clone(&__stampede_rest);
        let __stampede_skipped = (#(#skipped_names,)*);
        #take_clones
        let __stampede_keys: ::std::vec::Vec<#key_ty> = ::core::iter::Iterator::collect(
            ::core::iter::Iterator::map(#elements, |__stampede_element: #element_ty| #key_of_element),
        );
        let __stampede_origin = move |__stampede_asked: ::std::vec::Vec<#key_ty>| {
            let __stampede_elements: ::std::vec::Vec<#element_ty> = ::core::iter::Iterator::collect(
                ::core::iter::Iterator::map(
                    ::core::iter::IntoIterator::into_iter(__stampede_asked),
                    |__stampede_key: #key_ty| #element_of_key,
                ),
            );
            let __stampede_rest = ::core::clone::Clone::clone(&__stampede_rest);
            #[allow(clippy::clone_on_copy, clippy::redundant_clone)]
            let __stampede_skipped = ::core::clone::Clone::clone(&__stampede_skipped);
            #(#copy_clones)*
            async move {
                #(#restore_rest)*
                #(#restore_skipped)*
                #give_clones
                #bind_keys
                let __stampede_result: #ret_ty = async move { #body }.await;
                #answer_of_origin
            }
        };
        let __stampede_loaded = match __stampede_mode {
            // Calls with the same other arguments share origin calls (the first one's
            // origin, whose skipped and cloned arguments do not change the result).
            #private::CallMode::Cached => {
                __stampede_cache.batcher_for(__stampede_group, move || __stampede_origin)
                    .load_many(__stampede_keys)
                    .await
            }
            // One key from the single-key function: gathered with the others of the window.
            #private::CallMode::Single => {
                let __stampede_batcher = __stampede_cache.batcher_for(__stampede_group, move || __stampede_origin);
                let mut __stampede_found = ::std::collections::HashMap::new();
                let mut __stampede_failed = ::core::option::Option::None;
                for __stampede_key in __stampede_keys {
                    match __stampede_batcher.load(::core::clone::Clone::clone(&__stampede_key)).await {
                        ::core::result::Result::Ok(::core::option::Option::Some(__stampede_value)) => {
                            __stampede_found.insert(__stampede_key, __stampede_value);
                        }
                        ::core::result::Result::Ok(::core::option::Option::None) => {}
                        ::core::result::Result::Err(__stampede_error) => {
                            __stampede_failed = ::core::option::Option::Some(__stampede_error);
                            break;
                        }
                    }
                }
                match __stampede_failed {
                    ::core::option::Option::Some(__stampede_error) => ::core::result::Result::Err(__stampede_error),
                    ::core::option::Option::None => ::core::result::Result::Ok(__stampede_found),
                }
            }
            // `bypass` and `refresh`: the origin for every key, the cache left as it is.
            _ => __stampede_origin(__stampede_keys).await,
        };
        #answer
    }}
}
