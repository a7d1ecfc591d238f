//! Key accounting: every argument, `self` included, is in the key, in `skip(...)` or in
//! `clone(...)`, so no input that changes the result can be left out of the key.
use super::{key_usage, signature};
use crate::args::{Args, Set};
use crate::ctxt::Ctxt;
use crate::plan::{Key, Param};
use proc_macro2::Span;
use std::collections::btree_map::{BTreeMap, Entry};
use std::collections::BTreeSet;
use syn::{Expr, Ident, Receiver, Type};

/// The key, and the span of its expression when one was written; `None` when an argument
/// is unaccounted for or the key cannot be typed.
pub(super) fn check_key_covers_arguments(
    args: &Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    clone_listed: &BTreeSet<String>,
    cx: &mut Ctxt,
) -> Option<(Key, Option<Span>)> {
    let names = argument_names(receiver, params);
    let skipped = check_skip_list(args, receiver, params, &names, cx);
    let in_key: BTreeSet<String> = match &args.key {
        Some(key) => key_usage::variables_used(&key.value),
        // The default key is every argument not skipped; `self` is never keyed implicitly.
        None => names
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !skipped.contains_key(n) && !clone_listed.contains(n) && n != "self")
            .collect(),
    };
    let mut complete = true;
    if args.key.is_none() {
        // `any` stops at the first: one borrowed handle is reported, not each.
        complete &= !params
            .iter()
            .filter(|p| in_key.contains(&p.ident().to_string()))
            .any(|p| check_borrowed_handle(p, cx));
    }
    for (name, span) in &names {
        complete &= check_accounted(name, *span, args, &in_key, &skipped, clone_listed, cx);
    }
    if !complete {
        return None;
    }
    match &args.key {
        None => Some((
            Key::Params(default_key(params, &skipped, clone_listed)),
            None,
        )),
        Some(key) => written_key(key, args.key_type.as_ref(), params, cx),
    }
}

/// Every argument's name and span, `self` first.
fn argument_names(receiver: Option<&Receiver>, params: &[Param]) -> Vec<(String, Span)> {
    let receiver = receiver.map(|r| ("self".to_owned(), r.self_token.span));
    let params = params
        .iter()
        .map(|p| (p.ident().to_string(), p.ident().span()));
    receiver.into_iter().chain(params).collect()
}

/// The arguments `skip(...)` names, each under the first place it is written.
fn check_skip_list<'a>(
    args: &'a Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    names: &[(String, Span)],
    cx: &mut Ctxt,
) -> BTreeMap<String, &'a Ident> {
    let mut skipped = BTreeMap::new();
    for written in args.skip.iter().flat_map(|s| s.value.iter()) {
        let text = written.to_string();
        if !names.iter().any(|(n, _)| *n == text) {
            signature::not_an_argument(written, receiver, params, cx);
            continue;
        }
        match skipped.entry(text) {
            Entry::Vacant(first) => {
                first.insert(written);
            }
            Entry::Occupied(_) => cx.error(written, format!("`{written}` is skipped twice")),
        }
    }
    skipped
}

/// Whether one argument is in exactly one of the key and `skip(...)` (or cloned, which
/// leaves it out of the default key).
fn check_accounted(
    name: &str,
    span: Span,
    args: &Args,
    in_key: &BTreeSet<String>,
    skipped: &BTreeMap<String, &Ident>,
    clone_listed: &BTreeSet<String>,
    cx: &mut Ctxt,
) -> bool {
    let keyed = in_key.contains(name);
    match skipped.get(name) {
        Some(at) if keyed && args.key.is_some() => {
            cx.error(
                at,
                format!("`{name}` is both in the key and skipped: remove it from one (it is in the key if it changes the result)"),
            );
            false
        }
        None if !keyed && !clone_listed.contains(name) => {
            let message = if name == "self" {
                "`self` is neither in the key nor skipped: write `skip(self)` if the result does not depend on it, or use it in `key = ...` (with `key_type`)".to_owned()
            } else {
                format!(
                    "`{name}` is neither in the key nor skipped: if it changes the result, add it to the key (`key = (..., {name})`); if it does not, write `skip({name})`"
                )
            };
            cx.error_at(span, message);
            false
        }
        _ => true,
    }
}

/// Without `key = ...`: every argument neither skipped nor cloned, in order.
fn default_key(
    params: &[Param],
    skipped: &BTreeMap<String, &Ident>,
    clone_listed: &BTreeSet<String>,
) -> Vec<usize> {
    (0..params.len())
        .filter(|&i| {
            let name = params[i].ident().to_string();
            !skipped.contains_key(&name) && !clone_listed.contains(&name)
        })
        .collect()
}

/// `key = ...`: arguments (one, or a tuple of them), or an expression whose type
/// `key_type` says.
fn written_key(
    key: &Set<Expr>,
    key_type: Option<&Set<Type>>,
    params: &[Param],
    cx: &mut Ctxt,
) -> Option<(Key, Option<Span>)> {
    let span = Some(syn::spanned::Spanned::span(&key.value));
    let position = |ident: &Ident| params.iter().position(|p| p.ident() == ident);
    let argument = |expr: &Expr| match expr {
        Expr::Path(p) => p.path.get_ident().and_then(position),
        _ => None,
    };
    let parts: Option<Vec<usize>> = match &key.value {
        Expr::Path(_) => argument(&key.value).map(|i| vec![i]),
        Expr::Paren(p) => argument(&p.expr).map(|i| vec![i]),
        Expr::Tuple(t) => t.elems.iter().map(argument).collect(),
        _ => None,
    };
    match (parts, key_type) {
        (Some(parts), _) => Some((Key::Params(parts), span)),
        (None, Some(ty)) => Some((
            Key::Expr {
                expr: key.value.clone(),
                ty: ty.value.clone(),
            },
            span,
        )),
        (None, None) => {
            cx.error(&key.value, "this key is an expression, not arguments: say its type with `key_type = ...` (keys made of arguments, like `key = (tenant, id)`, need none)");
            None
        }
    }
}

/// Borrowed argument types that are usual keys (`&str`, `&[T]`, `&Path`, …), not handles.
const BORROWED_KEY_TYPES: &[&str] = &[
    "str",
    "String",
    "Path",
    "PathBuf",
    "OsStr",
    "OsString",
    "CStr",
    "CString",
    "Vec",
    "bool",
    "char",
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "usize",
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "isize",
    "Option",
    "Box",
    "Cow",
    "BTreeMap",
    "BTreeSet",
    "VecDeque",
    "Duration",
    "SystemTime",
    "IpAddr",
    "Ipv4Addr",
    "Ipv6Addr",
    "SocketAddr",
    "Uuid",
    "Url",
];

/// The most common mistake: a borrowed handle (`db: &PgPool`) left in the default key,
/// which would hold a clone of it. A borrowed argument of a named type other than the
/// usual borrowed keys is one error under the argument, asking which it is, instead of the
/// key bounds failing on a pool. A key written out (`key = (id, query)`) keys it as asked.
fn check_borrowed_handle(param: &Param, cx: &mut Ctxt) -> bool {
    let Type::Reference(reference) = &param.ty else {
        return false;
    };
    let Type::Path(path) = &*reference.elem else {
        return false;
    };
    let Some(last) = path.path.segments.last() else {
        return false;
    };
    // A single capital letter is most likely a generic parameter, whose bounds decide.
    let generic = path.path.segments.len() == 1 && last.ident.to_string().len() == 1;
    if path.qself.is_some() || generic || BORROWED_KEY_TYPES.iter().any(|k| last.ident == k) {
        return false;
    }
    let name = param.ident();
    let ty = last.ident.to_string();
    cx.error(
        name,
        format!("`{name}` borrows a `{ty}` and is in the key, which would hold a clone of it: if it changes the result, key it (`key = (..., {name})`); if it does not, `skip({name})` it, or `clone({name})` it so the function can refresh in the background"),
    );
    true
}
