//! The call: a fresh hit answered at once, else the origin (the body as written, in a
//! closure over the key) run through the cache, and each caller's answer.
use super::key;
use super::types::{private, Types};
use crate::plan::{Mode, Plan, Returns};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Block;

/// The call through the cache and the caller's answer, as the function's return type.
pub(super) fn call(plan: &Plan, types: &Types, block: &Block) -> TokenStream {
    let (take_clones, give_clones) = clones(plan);
    let origin = origin(plan, types, body(plan, types, block), &give_clones);
    let call = if plan.sync {
        blocking_call(types, &take_clones, &origin)
    } else {
        async_call(plan, types, &take_clones, &origin)
    };
    callers_answer(plan, types, &call, &quote!(value))
}

/// The caller's answer from the cache's `outcome`, as the function's return type: the
/// `Ok` value as `value` (an expression over `value`), a failure as the caller's own `E`.
pub(super) fn callers_answer(
    plan: &Plan,
    types: &Types,
    outcome: &TokenStream,
    value: &TokenStream,
) -> TokenStream {
    let private = private();
    let ret_ty = &types.ret;
    match &plan.returns {
        Returns::Result { .. } => {
            let answer = answer(plan, types);
            quote! {
                <#ret_ty as #private::Fallible>::from_result(match #outcome {
                    ::core::result::Result::Ok(value) => ::core::result::Result::Ok(#value),
                    #[allow(clippy::needless_borrow)]
                    ::core::result::Result::Err(failure) => {
                        #[allow(unused_imports)]
                        use #private::{AnswerByClone as _, AnswerByShare as _};
                        ::core::result::Result::Err(#answer)
                    }
                })
            }
        }
        Returns::Value(_) => quote! {
            match #outcome {
                ::core::result::Result::Ok(value) => #value,
                ::core::result::Result::Err(error) => #private::origin_failed(error),
            }
        },
    }
}

/// The body as written. A typed, unreachable `return` pins its type to the declared one,
/// so a wrong `return` or `?` is reported in the user's code, not in ours.
pub(super) fn body(plan: &Plan, types: &Types, block: &Block) -> TokenStream {
    let ret_ty = &types.ret;
    let stmts = &block.stmts;
    let stmts = if plan.cloned.iter().any(|c| c.is_self) {
        rename_self(quote!(#(#stmts)*))
    } else {
        quote!(#(#stmts)*)
    };
    quote_spanned! {ret_ty.span()=>
        #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::needless_return, clippy::empty_loop)]
        if false {
            let __stampede_fake_return: #ret_ty = loop {};
            return __stampede_fake_return;
        }
        #stmts
    }
}

/// The origin: a closure over the key that gives the body its arguments back and runs it.
fn origin(plan: &Plan, types: &Types, body: TokenStream, give_clones: &TokenStream) -> TokenStream {
    let private = private();
    let Types {
        key: key_ty,
        value: value_ty,
        ret: ret_ty,
        cache_error: cache_error_ty,
        ..
    } = types;
    let restore = key::restore_arguments(plan);
    match &plan.returns {
        // A plain `fn`: the body runs in a closure of its own, so its `return`s and `?`s
        // stay its own.
        Returns::Result { .. } if plan.sync => quote! {
            move |__stampede_key: &#key_ty| -> ::core::result::Result<#value_ty, #cache_error_ty> {
                #restore
                #private::origin_answer::<#ret_ty>((move || -> #ret_ty { #body })())
            }
        },
        Returns::Value(_) if plan.sync => quote! {
            move |__stampede_key: &#key_ty| -> ::core::result::Result<#value_ty, #private::Error> {
                #restore
                ::core::result::Result::Ok((move || -> #ret_ty { #body })())
            }
        },
        Returns::Result { .. } => quote! {
            move |__stampede_key: &#key_ty| {
                #restore
                async move {
                    #give_clones
                    let __stampede_result: #ret_ty = async move { #body }.await;
                    #private::origin_answer::<#ret_ty>(__stampede_result)
                }
            }
        },
        Returns::Value(_) => quote! {
            move |__stampede_key: &#key_ty| {
                #restore
                async move {
                    #give_clones
                    ::core::result::Result::Ok::<#value_ty, #private::Error>(async move { #body }.await)
                }
            }
        },
    }
}

/// A plain `fn`'s call: `load_blocking` answers a fresh hit before it builds anything
/// itself.
fn blocking_call(types: &Types, take_clones: &TokenStream, origin: &TokenStream) -> TokenStream {
    let private = private();
    let asserted = &types.asserted;
    quote! {{
        #take_clones
        let __stampede_origin = #origin;
        match __stampede_mode {
            #private::CallMode::Bypass => __stampede_origin(&__stampede_key),
            mode => #asserted.call_blocking(__stampede_cache, mode, __stampede_key, __stampede_origin),
        }
    }}
}

/// An `async fn`'s call. `stampede::bypass` / `stampede::refresh` choose per call; the
/// origin is written once. A fresh hit is answered before the load's future, origin and
/// clones are built.
fn async_call(
    plan: &Plan,
    types: &Types,
    take_clones: &TokenStream,
    origin: &TokenStream,
) -> TokenStream {
    let private = private();
    let Types {
        ret: ret_ty,
        asserted,
        ..
    } = types;
    let fresh = match &plan.returns {
        Returns::Result { .. } => quote! {
            <#ret_ty as #private::Fallible>::from_result(::core::result::Result::Ok(__stampede_value))
        },
        Returns::Value(_) => quote!(__stampede_value),
    };
    let load = match plan.mode {
        Mode::Detached => quote!(call_detached),
        Mode::Inline => quote!(call_inline),
    };
    quote! {{
        let __stampede_found = match __stampede_mode {
            #private::CallMode::Cached => match #asserted.lookup(__stampede_cache, &__stampede_key) {
                #private::Lookup::Fresh(__stampede_value) => return #fresh,
                #private::Lookup::Load(found) => ::core::option::Option::Some(found),
            },
            _ => ::core::option::Option::None,
        };
        #take_clones
        let __stampede_origin = #origin;
        // The rare modes are boxed, so their state stays out of what every hit carries.
        let __stampede_onward = match __stampede_found {
            ::core::option::Option::Some(found) => #private::Onward::load(#asserted.#load(__stampede_cache, __stampede_key, found, __stampede_origin)),
            ::core::option::Option::None => #private::Onward::rare(async move {
                match __stampede_mode {
                    #private::CallMode::Refresh => #asserted.call_refresh(__stampede_cache, __stampede_key, __stampede_origin).await,
                    _ => __stampede_origin(&__stampede_key).await,
                }
            }),
        };
        __stampede_onward.await
    }}
}

/// Each caller's own `E` from the cache's `failure`: a clone, the original, or its shared
/// form (see `Answer`). A bypassing or refreshing call runs the origin itself, in either
/// mode.
fn answer(plan: &Plan, types: &Types) -> TokenStream {
    let private = private();
    let error_ty = &types.error;
    let error_span = error_ty.span();
    // Without `map_error`, `E::from`; asked of the compiler so an `E` without it gets one
    // message under the error type (see `ErrorMap`).
    let map_error = match &plan.map_error {
        Some(path) => quote!(#path),
        None => quote_spanned! {error_span=>
            {
                #[allow(unused_imports)]
                use #private::{MapByFrom as _, MapMissing as _};
                #[allow(clippy::needless_borrow)]
                let map_error = (&&#private::ErrorMap::<#error_ty>::new()).map_error();
                map_error
            }
        },
    };
    let ran_origin = plan.sync || plan.mode == Mode::Inline;
    quote_spanned! {error_span=>
        (&&#private::Answer::<#error_ty>::new(
            #map_error,
            #ran_origin || __stampede_mode != #private::CallMode::Cached,
        )).answer(failure)
    }
}

/// `clone(...)`: the statements that take each clone before the call (under the name in
/// `clone(...)`, so a type that is not `Clone` is reported there), and those that give the
/// body its arguments back inside the origin, as references to the clones where the
/// arguments were references, so the body reads as written.
pub(super) fn clones(plan: &Plan) -> (TokenStream, TokenStream) {
    let mut take = TokenStream::new();
    let mut give = TokenStream::new();
    for (i, cloned) in plan.cloned.iter().enumerate() {
        let var = format_ident!("__stampede_clone_{}", i);
        let written = &cloned.written;
        let source = if cloned.by_ref {
            quote!(#written)
        } else {
            quote!(&#written)
        };
        take.extend(quote_spanned! {written.span()=>
            let #var = ::stampede::__private::clone_for_origin(#source);
        });
        let name = if cloned.is_self {
            format_ident!("__stampede_self")
        } else {
            written.clone()
        };
        let value = if cloned.by_ref {
            quote!(&#var)
        } else {
            quote!(#var)
        };
        give.extend(quote! {
            #[allow(unused_variables)]
            let #name = #value;
        });
    }
    (take, give)
}

/// The body with `self` (not `self::path`) renamed to the binding of its clone: a closure
/// cannot rebind `self`.
fn rename_self(tokens: TokenStream) -> TokenStream {
    use proc_macro2::{Group, Ident, TokenTree};
    let mut out = Vec::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        out.push(match token {
            TokenTree::Ident(ident) if ident == "self" => {
                let path = matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == ':');
                if path {
                    TokenTree::Ident(ident)
                } else {
                    TokenTree::Ident(Ident::new("__stampede_self", ident.span()))
                }
            }
            TokenTree::Group(group) => {
                let mut renamed = Group::new(group.delimiter(), rename_self(group.stream()));
                renamed.set_span(group.span());
                TokenTree::Group(renamed)
            }
            other => other,
        });
    }
    out.into_iter().collect()
}
