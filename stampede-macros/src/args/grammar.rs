//! The attribute's raw grammar: `name`, `name = value` and `name(...)`, separated by
//! commas, before any value is read.
use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, Ident, Token, Type};

/// One option as written, before its value is interpreted.
pub(super) struct RawOption {
    pub(super) name: Ident,
    pub(super) value: RawValue,
}

pub(super) enum RawValue {
    Flag,
    Expr(Expr),
    /// After `key_type =`, the one option whose value is a type.
    Type(Type),
    /// The tokens inside `name(...)`.
    List(TokenStream),
}

impl Parse for RawOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.call(syn::ext::IdentExt::parse_any)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            if name == "key_type" {
                RawValue::Type(input.parse()?)
            } else {
                RawValue::Expr(input.parse()?)
            }
        } else if input.peek(syn::token::Paren) {
            let content;
            syn::parenthesized!(content in input);
            RawValue::List(content.parse()?)
        } else {
            RawValue::Flag
        };
        Ok(RawOption { name, value })
    }
}

/// The options of the attribute, or the settings inside one option's parentheses.
pub(super) fn parse_options(tokens: TokenStream) -> syn::Result<Punctuated<RawOption, Token![,]>> {
    syn::parse::Parser::parse2(Punctuated::<RawOption, Token![,]>::parse_terminated, tokens)
}
