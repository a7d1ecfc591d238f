//! Code generation: the function keeps its signature, attributes and body; its body now
//! builds the key, finds the function's cache and loads through it. Beside it, a handle
//! constant (`LOAD_PROFILE` for `load_profile`). Generated code reaches the runtime only
//! through `::stampede::__private`.
use crate::plan::{Key, Mode, Param, Plan, Returns};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use std::sync::atomic::{AtomicUsize, Ordering};
use syn::{ItemFn, Type};

/// Expansions of the attribute so far in this crate: each gets its own number.
static EXPANSIONS: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn expand(plan: Plan, func: ItemFn) -> TokenStream {
    let private = quote!(::stampede::__private);
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = &func;
    let sig = &outer_signature(sig, &plan);
    let fn_name = &sig.ident;
    let fn_text = fn_name.to_string();
    let handle = format_ident!(
        "{}",
        fn_text.trim_start_matches("r#").to_uppercase(),
        span = fn_name.span()
    );

    let key_ty = key_type(&plan);
    let (value_ty, error_ty, ret_ty) = match &plan.returns {
        Returns::Result { ty, ok, err } => (ok.clone(), err.clone(), ty.clone()),
        Returns::Value(ty) => (ty.clone(), syn::parse_quote!(#private::Error), ty.clone()),
    };
    // A `Result` function's cache carries its failures as `Failure<E>` (the origin's error
    // behind an `Arc`), so an `E` that is not `Clone` still reaches every caller.
    let cache_error_ty = match &plan.returns {
        Returns::Result { .. } => quote!(#private::Failure<#error_ty>),
        Returns::Value(_) => quote!(#error_ty),
    };
    let cache_ty = quote!(#private::Cache<#key_ty, #value_ty, #cache_error_ty>);

    // The cache's site: one per expansion, even when a `macro_rules!` writes several
    // functions of one name at one position; the runtime adds the instantiation.
    let expansion = EXPANSIONS.fetch_add(1, Ordering::Relaxed).to_string();
    let site = quote! {
        ::core::concat!(::core::module_path!(), "::", #fn_text, "#", #expansion)
    };
    let explicit_name = match &plan.name {
        Some(name) => quote!(::core::option::Option::Some(#name)),
        None => quote!(::core::option::Option::None),
    };
    let policy = policy(&plan, &private);
    let error_span = syn::spanned::Spanned::span(&error_ty);
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
    let mode = match plan.mode {
        Mode::Detached => quote!(#private::LeaderMode::Detached),
        Mode::Inline => quote!(#private::LeaderMode::Inline),
    };
    // Without `local`, the runtime's backend decides where values live, so serde must be
    // able to write them; `local` caches never leave memory.
    let failure = quote!(#private::Failure::<#error_ty>::cache);
    // Every bounded call goes through `Asserted`: the assertions below report an unfit
    // type once, and these calls do not report it again.
    let asserted = quote!((&&#private::Asserted::<#key_ty, #value_ty, #cache_error_ty>::new()));
    let make = match (&plan.returns, plan.local) {
        (Returns::Result { .. }, true) => {
            quote!(#asserted.build_claimed(#policy, #failure, claim, source_version))
        }
        (Returns::Result { .. }, false) => {
            quote!(#asserted.build_shared(#policy, #failure, claim, source_version))
        }
        (Returns::Value(_), true) => quote!(#asserted.build_plain(#policy, claim, source_version)),
        (Returns::Value(_), false) => {
            quote!(#asserted.build_shared_plain(#policy, claim, source_version))
        }
    };
    // Typed where the user wrote it, so a function or closure of another shape is
    // reported under it.
    let source_version = match &plan.source_version {
        Some(expr) => {
            let span = syn::spanned::Spanned::span(expr);
            quote_spanned! {span=>
                let source_version: fn(&#value_ty) -> u64 = #expr;
                let source_version = ::core::option::Option::Some(source_version);
            }
        }
        None => quote! {
            let source_version: ::core::option::Option<fn(&#value_ty) -> u64> =
                ::core::option::Option::None;
        },
    };
    let uses = quote! {
        #[allow(unused_imports)]
        use #private::{Calls as _, Caches as _, PlainCaches as _, SharedCaches as _, SharedPlainCaches as _, Unfit as _};
    };
    let build = quote! {
        #[allow(clippy::needless_borrow)]
        fn __stampede_build(claim: &#private::Claim) -> #cache_ty {
            #uses
            #source_version
            #make
        }
    };
    // The handle finds the body's cache by the path `type_name` prints, which has no `r#`.
    let function = syn::ext::IdentExt::unraw(fn_name).to_string();
    let handle_value = |here: TokenStream, key_of: &TokenStream| {
        quote! {{
            #build
            #private::handle(#site, #function, #explicit_name, __stampede_build, #here, #mode, #key_of)
        }}
    };
    let body_site = handle_value(quote!(|| ""), &quote!(#private::ExpressionKey::new()));
    let (key_of_ty, key_of) = key_builder(&plan, &key_ty);
    let handle_site = handle_value(quote!(|| ::core::any::type_name_of_val(&|| ())), &key_of);

    let assertions = assertions(&plan, &key_ty, &value_ty, &error_ty, &private);
    let (key_expr, restore) = key_and_restore(&plan, &key_ty);
    let load = match plan.mode {
        Mode::Detached => quote!(call_detached),
        Mode::Inline => quote!(call_inline),
    };
    let stmts = &block.stmts;
    let stmts = if plan.cloned.iter().any(|c| c.is_self) {
        rename_self(quote!(#(#stmts)*))
    } else {
        quote!(#(#stmts)*)
    };
    let (take_clones, give_clones) = clones(&plan);
    // A typed, unreachable `return` pins the body's type to the declared one, so a wrong
    // `return` or `?` is reported in the user's code, not in ours.
    let body = quote_spanned! {ret_ty_span(&ret_ty)=>
        #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::needless_return, clippy::empty_loop)]
        if false {
            let __stampede_fake_return: #ret_ty = loop {};
            return __stampede_fake_return;
        }
        #stmts
    };
    let origin = match &plan.returns {
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
    };
    // `stampede::bypass` / `stampede::refresh` choose per call; the origin is written once.
    // A fresh hit, answered before the load's future, origin and clones are built.
    let fresh = match &plan.returns {
        Returns::Result { .. } => quote! {
            <#ret_ty as #private::Fallible>::from_result(::core::result::Result::Ok(__stampede_value))
        },
        Returns::Value(_) => quote!(__stampede_value),
    };
    let call = if plan.sync {
        // `load_blocking` answers a fresh hit before it builds anything itself.
        quote! {{
            #take_clones
            let __stampede_origin = #origin;
            match __stampede_mode {
                #private::CallMode::Bypass => __stampede_origin(&__stampede_key),
                mode => #asserted.call_blocking(__stampede_cache, mode, __stampede_key, __stampede_origin),
            }
        }}
    } else {
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
    };
    // Each caller's own `E`: a clone, the original, or its shared form (see `Answer`). A
    // bypassing or refreshing call runs the origin itself, in either mode.
    let ran_origin = plan.sync || plan.mode == Mode::Inline;
    let answer = quote_spanned! {error_span=>
        (&&#private::Answer::<#error_ty>::new(
            #map_error,
            #ran_origin || __stampede_mode != #private::CallMode::Cached,
        )).answer(failure)
    };
    let call = match &plan.returns {
        Returns::Result { .. } => quote! {
            <#ret_ty as #private::Fallible>::from_result(match #call {
                ::core::result::Result::Ok(value) => ::core::result::Result::Ok(value),
                #[allow(clippy::needless_borrow)]
                ::core::result::Result::Err(failure) => {
                    #[allow(unused_imports)]
                    use #private::{AnswerByClone as _, AnswerByShare as _};
                    ::core::result::Result::Err(#answer)
                }
            })
        },
        Returns::Value(_) => quote! {
            match #call {
                ::core::result::Result::Ok(value) => value,
                ::core::result::Result::Err(error) => #private::origin_failed(error),
            }
        },
    };

    let mode_doc = match plan.mode {
        _ if plan.sync => "blocking: a plain `fn`, whose callers are threads; the origin runs in the leading thread, a thread that finds a load running blocks until it settles, and one takes over if the leader panics",
        Mode::Detached => "detached: every argument is owned or cloned for the origin, so the origin runs as its own task and a caller that gives up never cancels a load others wait for",
        Mode::Inline => "inline with takeover: an argument borrows, so the origin runs in the leading caller and a waiter takes over if that caller goes away",
    };
    let handle_doc = format!(
        " The cache of [`{fn_text}`]: `invalidate(&key).await`, `invalidate_args((arg, ...)).await`, `insert(&key, value).await`, `invalidate_all().await`, `stats()`.\n\n Leader mode: {mode_doc}."
    );

    // A generic function's instantiations are separate caches that one constant outside
    // it cannot tell apart, so it has no handle.
    let generic = plan_is_generic(sig);
    let handle_item = if generic || plan.trait_impl {
        TokenStream::new()
    } else {
        quote! {
            #[doc = #handle_doc]
            #[allow(dead_code)]
            #vis const #handle: #private::Handle<#key_ty, #value_ty, #cache_error_ty, #key_of_ty> = #handle_site;
        }
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            // First, before any other cached call can: this call's `bypass` or `refresh`.
            let __stampede_mode = #private::take_call_mode();
            #assertions
            let __stampede_key: #key_ty = #key_expr;
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

        #handle_item
    }
}

/// `clone(...)`: the statements that take each clone before the call (under the name in
/// `clone(...)`, so a type that is not `Clone` is reported there), and those that give the
/// body its arguments back inside the origin, as references to the clones where the
/// arguments were references, so the body reads as written.
fn clones(plan: &Plan) -> (TokenStream, TokenStream) {
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

fn ret_ty_span(ty: &Type) -> Span {
    syn::spanned::Spanned::span(ty)
}

/// The handle's way from the function's keyed arguments to its key (`invalidate_args`): a
/// `fn` pointer taking them as the function does, and its type; `()` where the key is an
/// expression, or an argument's type cannot be named outside the function (a named
/// lifetime, `impl Trait`, `Self`).
fn key_builder(plan: &Plan, key_ty: &TokenStream) -> (TokenStream, TokenStream) {
    let none = (
        quote!(::stampede::__private::ExpressionKey<#key_ty>),
        quote!(::stampede::__private::ExpressionKey::new()),
    );
    let Key::Params(parts) = &plan.key else {
        return none;
    };
    if plan.key_type.is_some() {
        return none;
    }
    let keyed: Vec<&Param> = parts.iter().map(|&i| &plan.params[i]).collect();
    if keyed
        .iter()
        .any(|param| !nameable_outside(param.ty.to_token_stream()))
    {
        return none;
    }
    let names: Vec<_> = keyed.iter().map(|param| param.ident()).collect();
    let types: Vec<_> = keyed.iter().map(|param| &param.ty).collect();
    let values = keyed.iter().map(|param| {
        let name = param.ident();
        if param.by_ref {
            quote!(::std::borrow::ToOwned::to_owned(#name))
        } else {
            quote!(#name)
        }
    });
    let key = match keyed.len() {
        1 => quote!(#(#values)*),
        _ => quote!((#(#values,)*)),
    };
    let fn_ty = quote!(fn(#(#types),*) -> #key_ty);
    let builder = quote! {
        (|#(#names: #types),*| -> #key_ty { #key }) as #fn_ty
    };
    (fn_ty, builder)
}

/// Whether a type written in the signature means the same at the handle: no named
/// lifetime (other than `'static`), no `impl Trait`, no `Self`.
fn nameable_outside(tokens: TokenStream) -> bool {
    use proc_macro2::TokenTree;
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            TokenTree::Punct(p) if p.as_char() == '\'' => {
                if let Some(TokenTree::Ident(name)) = tokens.peek() {
                    if name != "static" && name != "_" {
                        return false;
                    }
                }
            }
            TokenTree::Ident(ident) if ident == "impl" || ident == "Self" => return false,
            TokenTree::Group(group) if !nameable_outside(group.stream()) => return false,
            _ => {}
        }
    }
    true
}

/// The key's type: `key_type` when given, else the owned types of the keyed arguments.
fn key_type(plan: &Plan) -> TokenStream {
    if let Some(ty) = &plan.key_type {
        return ty.to_token_stream();
    }
    match &plan.key {
        Key::Expr { ty, .. } => ty.to_token_stream(),
        Key::Params(parts) => {
            let types = parts.iter().map(|&i| owned_type(&plan.params[i]));
            match parts.len() {
                1 => types.into_iter().next().unwrap_or_default(),
                _ => quote!((#(#types,)*)),
            }
        }
    }
}

fn owned_type(param: &Param) -> TokenStream {
    match &param.ty {
        Type::Reference(r) => {
            let elem = &r.elem;
            quote!(<#elem as ::std::borrow::ToOwned>::Owned)
        }
        ty => ty.to_token_stream(),
    }
}

/// The key expression, and the statements that give the origin back the arguments the
/// key took. Owned arguments move into the key (a hit clones nothing); the origin clones
/// them back out, on a miss only. Borrowed arguments are copied into the key as owned.
fn key_and_restore(plan: &Plan, key_ty: &TokenStream) -> (TokenStream, TokenStream) {
    let Key::Params(parts) = &plan.key else {
        let Key::Expr { expr, .. } = &plan.key else {
            unreachable!()
        };
        return (quote!(#expr), TokenStream::new());
    };
    let single = parts.len() == 1;
    let mut values = Vec::new();
    let mut restore = Vec::new();
    for (position, &i) in parts.iter().enumerate() {
        let param = &plan.params[i];
        let name = param.ident();
        if param.by_ref {
            values.push(quote!(::std::borrow::ToOwned::to_owned(#name)));
            continue;
        }
        values.push(quote!(#name));
        let pat = &param.pat;
        let field = if single {
            quote!(__stampede_key)
        } else {
            let index = syn::Index::from(position);
            quote!(&__stampede_key.#index)
        };
        restore.push(quote!(let #pat = ::core::clone::Clone::clone(#field);));
    }
    let _ = key_ty;
    let expr = if single {
        values.into_iter().next().unwrap_or_default()
    } else {
        quote!((#(#values,)*))
    };
    (expr, quote!(#(#restore)*))
}

fn policy(plan: &Plan, private: &TokenStream) -> TokenStream {
    let name = quote!(#private::claimed_name(claim));
    let durations = [
        ("fresh", Some(plan.fresh)),
        ("stale", plan.stale),
        ("stale_if_error", plan.stale_if_error),
        ("timeout", plan.timeout),
        ("lease", plan.lease),
    ];
    let mut calls: Vec<TokenStream> = durations
        .into_iter()
        .filter_map(|(setter, duration)| {
            let setter = format_ident!("{setter}");
            let millis = duration?.millis;
            Some(quote!(.#setter(::core::time::Duration::from_millis(#millis))))
        })
        .collect();
    if !plan.coalesce {
        calls.push(quote!(.coalesce(false)));
    }
    if let Some(beta) = plan.xfetch {
        calls.push(quote!(.xfetch(#beta)));
    }
    if let Some(jitter) = plan.jitter {
        calls.push(quote!(.jitter(#jitter)));
    }
    if let Some(admission) = &plan.admission {
        calls.push(quote!(.admission(#admission)));
    }
    if plan.skip_none {
        let value_ty = match &plan.returns {
            Returns::Result { ok, .. } => ok,
            Returns::Value(ty) => ty,
        };
        calls.push(quote!(.cache_if(::core::option::Option::is_some as fn(&#value_ty) -> bool)));
    }
    if let (Some(kept), Returns::Result { err, .. }) = (&plan.cache_errors, &plan.returns) {
        let keep = &kept.keep;
        let millis = kept.ttl.millis;
        // The cache's errors are `Failure<E>`: the predicate speaks for the origin's.
        calls.push(quote! {
            .cache_errors(
                ::core::time::Duration::from_millis(#millis),
                (|failure: &#private::Failure<#err>| failure.origin_is(#keep))
                    as fn(&#private::Failure<#err>) -> bool,
            )
        });
    }
    if let Some(version) = plan.version {
        calls.push(quote!(.version(#version)));
    }
    if let Some(capacity) = plan.capacity {
        calls.push(quote!(.capacity(#capacity)));
    }
    quote!(#private::Policy::builder(#name) #(#calls)*)
}

/// Bound checks placed under the user's tokens, so an unfit key, value or error is
/// reported there with the runtime traits' messages.
fn assertions(
    plan: &Plan,
    key_ty: &TokenStream,
    value_ty: &Type,
    error_ty: &Type,
    private: &TokenStream,
) -> TokenStream {
    let key_span = match (&plan.key_type, &plan.key) {
        (Some(ty), _) => syn::spanned::Spanned::span(ty),
        (None, _) if plan.key_span.is_some() => plan.key_span.unwrap_or_else(Span::call_site),
        (None, Key::Params(parts)) if !parts.is_empty() => plan.params[parts[0]].ident().span(),
        _ => Span::call_site(),
    };
    let value_span = syn::spanned::Spanned::span(value_ty);
    let error_span = syn::spanned::Spanned::span(error_ty);
    let key = quote_spanned!(key_span=> #private::assert_key::<#key_ty>(););
    let value = if plan.local {
        quote_spanned!(value_span=> #private::assert_local_value::<#value_ty>();)
    } else {
        quote_spanned!(value_span=>
            #private::assert_local_value::<#value_ty>();
            #private::assert_storable_value::<#value_ty>();
        )
    };
    // A plain value must not be a `Result` the macro could not see (an alias): the
    // compiler is asked, and says so under the return type.
    let plain = match &plan.returns {
        Returns::Value(ty) => quote_spanned! {value_span=>
            {
                use #private::ProbeValue as _;
                // A binding, so the error is placed under the return type.
                let __stampede_returns = #private::Probe::<#ty>::new().returns();
                #private::assert_plain_value(__stampede_returns);
            }
        },
        Returns::Result { .. } => TokenStream::new(),
    };
    let error = match (&plan.returns, &plan.map_error) {
        (Returns::Value(_), _) => TokenStream::new(),
        (Returns::Result { .. }, _) => {
            quote_spanned!(error_span=> #private::assert_origin_error::<#error_ty>();)
        }
    };
    quote!(#key #value #plain #error)
}

/// Whether the function has type or const parameters (lifetimes do not make instances).
fn plan_is_generic(sig: &syn::Signature) -> bool {
    sig.generics.type_params().next().is_some() || sig.generics.const_params().next().is_some()
}

/// The signature as written, less `mut` on arguments that move into the key: they are
/// mutable again where the body gets them back (see [`key_and_restore`]).
fn outer_signature(sig: &syn::Signature, plan: &Plan) -> syn::Signature {
    let mut sig = sig.clone();
    let Key::Params(parts) = &plan.key else {
        return sig;
    };
    let moved: Vec<String> = parts
        .iter()
        .map(|&i| &plan.params[i])
        .filter(|p| !p.by_ref)
        .map(|p| p.ident().to_string())
        .collect();
    for input in sig.inputs.iter_mut() {
        if let syn::FnArg::Typed(typed) = input {
            if let syn::Pat::Ident(pat) = &mut *typed.pat {
                if moved.contains(&pat.ident.to_string()) {
                    pat.mutability = None;
                }
            }
        }
    }
    sig
}
