//! The cache's types, read from the plan, and the assertions that report an unfit key,
//! value or error type under the user's tokens.
use super::key;
use crate::plan::{Key, Plan, Returns};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Type;

/// Where generated code reaches the runtime: only through here.
pub(super) fn private() -> TokenStream {
    quote!(::stampede::__private)
}

/// The types of one function's cache.
pub(super) struct Types {
    pub(super) key: TokenStream,
    /// The cached value: the `Ok` type, or the plain value.
    pub(super) value: Type,
    /// The origin's error: the function's, or `stampede::Error` for a plain value.
    pub(super) error: Type,
    /// The return type as declared.
    pub(super) ret: Type,
    /// The error the cache carries.
    pub(super) cache_error: TokenStream,
    /// `Cache<K, V, E>`.
    pub(super) cache: TokenStream,
    /// Every bounded call goes through `Asserted`: the assertions report an unfit type
    /// once, and these calls do not report it again.
    pub(super) asserted: TokenStream,
}

impl Types {
    pub(super) fn of(plan: &Plan) -> Types {
        let private = private();
        let key = key::key_type(plan);
        let (value, error, ret) = match &plan.returns {
            Returns::Result { ty, ok, err } => (ok.clone(), err.clone(), ty.clone()),
            Returns::Value(ty) => (ty.clone(), syn::parse_quote!(#private::Error), ty.clone()),
        };
        // A batch caches each element's value, or `None` where the origin found nothing.
        let value = match &plan.batch {
            Some(batch) => {
                let found = &batch.value;
                syn::parse_quote_spanned!(found.span()=> ::core::option::Option<#found>)
            }
            None => value,
        };
        // A `Result` function's cache carries its failures as `Failure<E>` (the origin's
        // error behind an `Arc`), so an `E` that is not `Clone` still reaches every caller.
        let cache_error = match &plan.returns {
            Returns::Result { .. } => quote!(#private::Failure<#error>),
            Returns::Value(_) => quote!(#error),
        };
        let cache = quote!(#private::Cache<#key, #value, #cache_error>);
        let asserted = quote!((&&#private::Asserted::<#key, #value, #cache_error>::new()));
        Types {
            key,
            value,
            error,
            ret,
            cache_error,
            cache,
            asserted,
        }
    }
}

/// Bound checks placed under the user's tokens, so an unfit key, value or error is
/// reported there with the runtime traits' messages.
pub(super) fn assertions(plan: &Plan, types: &Types) -> TokenStream {
    let private = private();
    let Types {
        key: key_ty,
        value: value_ty,
        error: error_ty,
        ..
    } = types;
    let key_span = match (&plan.key_type, plan.key_span, &plan.key) {
        (Some(ty), _, _) => ty.span(),
        (None, Some(span), _) => span,
        (None, None, Key::Params(parts)) if !parts.is_empty() => {
            plan.params[parts[0]].ident().span()
        }
        _ => Span::call_site(),
    };
    let value_span = value_ty.span();
    let error_span = error_ty.span();
    // Without `local`, the runtime's backend decides where entries live: serde must write
    // the key too.
    let key = if plan.local {
        quote_spanned!(key_span=> #private::assert_key::<#key_ty>();)
    } else {
        quote_spanned!(key_span=>
            #private::assert_key::<#key_ty>();
            #private::assert_storable_key::<#key_ty>();
        )
    };
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
    let error = match &plan.returns {
        Returns::Value(_) => TokenStream::new(),
        Returns::Result { .. } => {
            quote_spanned!(error_span=> #private::assert_origin_error::<#error_ty>();)
        }
    };
    quote!(#key #value #plain #error)
}

/// The trait methods generated calls use, in scope under `_` names.
pub(super) fn trait_imports() -> TokenStream {
    let private = private();
    quote! {
        #[allow(unused_imports)]
        use #private::{Calls as _, Caches as _, PlainCaches as _, SharedCaches as _, SharedPlainCaches as _, Unfit as _};
    }
}
