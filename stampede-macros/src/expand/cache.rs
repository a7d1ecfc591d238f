//! The function's cache: its policy, the `fn` that builds it, and the site by which the
//! body and the handle constant both find it.
use super::from_key::{admission_group_fn, tags_fn};
use super::types::{private, trait_imports, Types};
use crate::args::Priority;
use crate::plan::{Mode, Plan, Returns};
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use std::sync::atomic::{AtomicUsize, Ordering};
use syn::spanned::Spanned;
use syn::Ident;

/// Expansions of the attribute so far in this crate: each gets its own number.
static EXPANSIONS: AtomicUsize = AtomicUsize::new(0);

/// What finds (and on first use builds) the function's cache: everything of a
/// `#private::handle(...)` call but the instantiation and the key's argument form.
pub(super) struct CacheSite {
    /// This expansion's own place: module path, function name and expansion number.
    site: TokenStream,
    /// The function's name as `type_name` prints it, which has no `r#`.
    function: String,
    /// `name = "..."` as an `Option<&str>`.
    explicit_name: TokenStream,
    /// The `__stampede_build` item.
    build: TokenStream,
    /// The plan's leader mode, as the runtime's `LeaderMode`.
    mode: TokenStream,
}

impl CacheSite {
    pub(super) fn new(plan: &Plan, fn_name: &Ident, types: &Types) -> CacheSite {
        let fn_text = fn_name.to_string();
        // One per expansion, even when a `macro_rules!` writes several functions of one
        // name at one position; the runtime adds the instantiation.
        let expansion = EXPANSIONS.fetch_add(1, Ordering::Relaxed).to_string();
        let site = quote! {
            ::core::concat!(::core::module_path!(), "::", #fn_text, "#", #expansion)
        };
        let explicit_name = match &plan.name {
            Some(name) => quote!(::core::option::Option::Some(#name)),
            None => quote!(::core::option::Option::None),
        };
        let private = private();
        let mode = match plan.mode {
            Mode::Detached => quote!(#private::LeaderMode::Detached),
            Mode::Inline => quote!(#private::LeaderMode::Inline),
        };
        CacheSite {
            site,
            function: syn::ext::IdentExt::unraw(fn_name).to_string(),
            explicit_name,
            build: build_fn(plan, types),
            mode,
        }
    }

    /// A handle on the cache, for the instantiation `here` names, with `key_of` the way
    /// from the keyed arguments to the key.
    pub(super) fn handle(&self, here: TokenStream, key_of: &TokenStream) -> TokenStream {
        let private = private();
        let CacheSite {
            site,
            function,
            explicit_name,
            build,
            mode,
        } = self;
        quote! {{
            #build
            #private::handle(#site, #function, #explicit_name, __stampede_build, #here, #mode, #key_of)
        }}
    }
}

/// `__stampede_build`: the cache of one instantiation, built from the policy for the
/// name the runtime claimed.
fn build_fn(plan: &Plan, types: &Types) -> TokenStream {
    let private = private();
    let Types {
        value: value_ty,
        error: error_ty,
        cache: cache_ty,
        asserted,
        ..
    } = types;
    let policy = policy(plan);
    let failure = quote!(#private::Failure::<#error_ty>::cache);
    // Without `local`, the runtime's backend decides where values live, so serde must be
    // able to write them; `local` caches never leave memory.
    let make = match (&plan.returns, plan.local) {
        (Returns::Result { .. }, true) => {
            quote!(#asserted.build_claimed(#policy, #failure, claim, source_version, tags, admission_group))
        }
        (Returns::Result { .. }, false) => {
            quote!(#asserted.build_shared(#policy, #failure, claim, source_version, tags, admission_group))
        }
        (Returns::Value(_), true) => {
            quote!(#asserted.build_plain(#policy, claim, source_version, tags, admission_group))
        }
        (Returns::Value(_), false) => {
            quote!(#asserted.build_shared_plain(#policy, claim, source_version, tags, admission_group))
        }
    };
    // Asked under the user's expression, so a function of another shape, or a version of
    // another type, is reported there, once.
    let source_version = match (&plan.source_version, &plan.batch) {
        (Some(expr), Some(batch)) => {
            let found = &batch.value;
            quote_spanned! {expr.span()=>
                let source_version = ::core::option::Option::Some(
                    #private::batch_source_version::<#found, _, _>(#expr),
                );
            }
        }
        (Some(expr), None) => quote_spanned! {expr.span()=>
            let source_version = ::core::option::Option::Some(
                #private::source_version::<#value_ty, _, _>(#expr),
            );
        },
        (None, _) => quote! {
            let source_version: ::core::option::Option<#private::VersionOf<#value_ty>> =
                ::core::option::Option::None;
        },
    };
    let tags = tags_fn(plan, types);
    let admission_group = admission_group_fn(plan, types);
    let uses = trait_imports();
    quote! {
        #[allow(clippy::needless_borrow)]
        fn __stampede_build(claim: &#private::Claim) -> #cache_ty {
            #uses
            #source_version
            #tags
            #admission_group
            #make
        }
    }
}

/// The `Policy` builder: each setting the attribute gives, as the runtime's setter.
fn policy(plan: &Plan) -> TokenStream {
    let private = private();
    let name = quote!(#private::claimed_name(claim));
    let durations = [
        ("fresh", Some(plan.fresh)),
        ("stale", plan.stale),
        ("stale_if_error", plan.stale_if_error),
        ("timeout", plan.timeout),
        ("load_timeout", plan.load_timeout),
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
    let priority = match plan.priority {
        Some(Priority::Low) => Some(quote!(Low)),
        Some(Priority::High) => Some(quote!(High)),
        Some(Priority::Normal) | None => None,
    };
    if let Some(priority) = priority {
        calls.push(quote!(.priority(#private::Priority::#priority)));
    }
    if let Some(batch) = &plan.batch {
        if let Some(keys) = batch.max_batch {
            let keys = keys as usize;
            calls.push(quote!(.max_batch(#keys)));
        }
        if let Some(window) = batch.window {
            let millis = window.millis;
            calls.push(quote!(.batch_window(::core::time::Duration::from_millis(#millis))));
        }
    }
    if plan.skip_none {
        let value_ty = match &plan.batch {
            Some(batch) => {
                let found = &batch.value;
                quote!(::core::option::Option<#found>)
            }
            None => {
                let cached = plan.returns.cached();
                quote!(#cached)
            }
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
