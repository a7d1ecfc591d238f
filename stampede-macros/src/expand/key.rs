//! The key: its type, the expression that builds it before the body, the statements that
//! give the origin back the arguments it took, and the handle's argument form.
use crate::plan::{Key, Param, Plan};
use proc_macro2::TokenStream;
use quote::{quote, ToTokens};
use syn::{Signature, Type};

/// The key's type: `key_type` when given, else the owned types of the keyed arguments.
pub(super) fn key_type(plan: &Plan) -> TokenStream {
    if let Some(ty) = &plan.key_type {
        return ty.to_token_stream();
    }
    match &plan.key {
        Key::Expr { ty, .. } => ty.to_token_stream(),
        Key::Params(parts) => one_or_tuple(parts.iter().map(|&i| match &plan.batch {
            // A batch's key holds one element of the batch argument.
            Some(batch) if batch.param == i => batch.element.to_token_stream(),
            _ => owned_type(&plan.params[i]),
        })),
    }
}

/// An argument's value in the key: itself, or an owned copy of what it borrows.
fn owned_value(param: &Param) -> TokenStream {
    let name = param.ident();
    if param.by_ref {
        quote!(::std::borrow::ToOwned::to_owned(#name))
    } else {
        quote!(#name)
    }
}

/// One part as itself, any other number as a tuple: the shape of a key of arguments.
pub(super) fn one_or_tuple(parts: impl IntoIterator<Item = TokenStream>) -> TokenStream {
    let mut parts: Vec<TokenStream> = parts.into_iter().collect();
    match parts.len() {
        1 => parts.remove(0),
        _ => quote!((#(#parts,)*)),
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

/// The key expression. Owned arguments move into the key (a hit clones nothing);
/// borrowed arguments are copied into it as owned.
pub(super) fn key_value(plan: &Plan) -> TokenStream {
    match &plan.key {
        Key::Expr { expr, .. } => quote!(#expr),
        Key::Params(parts) => one_or_tuple(parts.iter().map(|&i| owned_value(&plan.params[i]))),
    }
}

/// The statements that give the origin back the owned arguments the key took, cloned out
/// of it, on a miss only.
pub(super) fn restore_arguments(plan: &Plan) -> TokenStream {
    let Key::Params(parts) = &plan.key else {
        return TokenStream::new();
    };
    let single = parts.len() == 1;
    let keyed = parts
        .iter()
        .enumerate()
        .map(|(position, &i)| (position, &plan.params[i]));
    let restore = keyed
        .filter(|(_, param)| !param.by_ref)
        .map(|(position, param)| {
            let pat = &param.pat;
            let field = if single {
                quote!(__stampede_key)
            } else {
                let index = syn::Index::from(position);
                quote!(&__stampede_key.#index)
            };
            quote!(let #pat = ::core::clone::Clone::clone(#field);)
        });
    quote!(#(#restore)*)
}

/// The signature as written, less `mut` on arguments that move into the key: they are
/// mutable again where the body gets them back (see [`restore_arguments`]).
pub(super) fn outer_signature(sig: &Signature, plan: &Plan) -> Signature {
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
        if let syn::FnArg::Typed(typed) = input
            && let syn::Pat::Ident(pat) = &mut *typed.pat
            && moved.contains(&pat.ident.to_string())
        {
            pat.mutability = None;
        }
    }
    sig
}

/// The handle's way from the function's keyed arguments to its key (`invalidate_args`): a
/// `fn` pointer taking them as the function does, and its type; `()` where the key is an
/// expression, or an argument's type cannot be named outside the function (a named
/// lifetime, `impl Trait`, `Self`).
pub(super) fn key_builder(plan: &Plan, key_ty: &TokenStream) -> (TokenStream, TokenStream) {
    let none = (
        quote!(::stampede::__private::ExpressionKey<#key_ty>),
        quote!(::stampede::__private::ExpressionKey::new()),
    );
    let Key::Params(parts) = &plan.key else {
        return none;
    };
    if plan.key_type.is_some() || plan.batch.is_some() {
        return none;
    }
    let keyed: Vec<&Param> = parts.iter().map(|&i| &plan.params[i]).collect();
    if keyed
        .iter()
        .any(|param| !nameable_outside(param.ty.to_token_stream()))
    {
        return none;
    }
    if keyed.is_empty() {
        // The unit key, spelled so that clippy's `unused_unit` has nothing to say in user code.
        return (quote!(fn()), quote!((|| {}) as fn()));
    }
    let names: Vec<_> = keyed.iter().map(|param| param.ident()).collect();
    let types: Vec<_> = keyed.iter().map(|param| &param.ty).collect();
    let key = one_or_tuple(keyed.iter().map(|param| owned_value(param)));
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
                if let Some(TokenTree::Ident(name)) = tokens.peek()
                    && name != "static"
                    && name != "_"
                {
                    return false;
                }
            }
            TokenTree::Ident(ident) if ident == "impl" || ident == "Self" => return false,
            TokenTree::Group(group) if !nameable_outside(group.stream()) => return false,
            _ => {}
        }
    }
    true
}
