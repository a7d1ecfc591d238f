//! What the attribute refuses: keys that leave out an input, options the return type
//! cannot honour, signatures the cache cannot hold. Every mistake is collected in one
//! [`Ctxt`] and reported together, each under the token at fault.
use crate::args::{Args, LoadMode, Millis, Returning, Set};
use crate::ctxt::Ctxt;
use proc_macro2::Span;
use std::collections::BTreeSet;
use syn::visit::Visit;
use syn::{
    Expr, FnArg, GenericArgument, Ident, ItemFn, Pat, PatIdent, PathArguments, ReceiverKind,
    ReturnType, Type,
};

mod key_usage;

/// How the leader runs the origin (ARCHITECTURE.md, decision 1).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every argument is owned: the origin runs as its own task.
    Detached,
    /// Something borrows: the origin runs in the leading caller, with takeover.
    Inline,
}

/// One argument of the function.
pub(crate) struct Param {
    pub(crate) pat: PatIdent,
    pub(crate) ty: Type,
    /// `&T` or `&mut T`: the key holds `T::Owned`.
    pub(crate) by_ref: bool,
}

impl Param {
    pub(crate) fn ident(&self) -> &Ident {
        &self.pat.ident
    }
}

// One per attribute, built once at compile time: size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Key {
    /// Arguments themselves (one, several as a tuple in the order written, or none):
    /// the key's type comes from their types.
    Params(Vec<usize>),
    /// Any other expression, evaluated as written before the body; its type is
    /// `key_type`.
    Expr { expr: Expr, ty: Type },
}

#[allow(clippy::large_enum_variant)]
pub(crate) enum Returns {
    /// A `Result` (named `Result`, or `returns = result`): only `Ok` is cached. The
    /// compiler confirms it is one.
    Result { ty: Type, ok: Type, err: Type },
    /// A plain value: cannot fail. The compiler confirms it is no `Result` in disguise
    /// (an alias), which would otherwise cache its errors.
    Value(Type),
}

/// An argument (or `self`) whose owned clone the origin runs on, so it needs no borrow.
pub(crate) struct Cloned {
    /// The name as written in `clone(...)`: an unfit type is reported under it.
    pub(crate) written: Ident,
    /// The argument is a reference: the clone is of its target, and the body gets a
    /// reference to the clone, so it reads as written.
    pub(crate) by_ref: bool,
    pub(crate) is_self: bool,
}

/// A checked attribute, ready to expand.
pub(crate) struct Plan {
    pub(crate) fresh: Millis,
    pub(crate) stale: Option<Millis>,
    pub(crate) stale_if_error: Option<Millis>,
    pub(crate) timeout: Option<Millis>,
    pub(crate) lease: Option<Millis>,
    pub(crate) coalesce: bool,
    pub(crate) xfetch: Option<f64>,
    pub(crate) jitter: Option<f64>,
    pub(crate) admission: Option<syn::LitStr>,
    pub(crate) name: Option<syn::LitStr>,
    pub(crate) version: Option<u32>,
    pub(crate) capacity: Option<u64>,
    pub(crate) local: bool,
    /// In an `impl Trait for T`, which cannot take an associated constant the trait does
    /// not declare: no handle.
    pub(crate) trait_impl: bool,
    /// `cache_none = false`: a `None` is the answer of its load, never stored.
    pub(crate) skip_none: bool,
    /// `cache_errors(if = ..., for = ...)`: negative caching.
    pub(crate) cache_errors: Option<crate::args::CacheErrors>,
    pub(crate) map_error: Option<syn::Path>,
    /// `source_version = f`: a `fn(&V) -> u64` over the cached value.
    pub(crate) source_version: Option<syn::Expr>,
    pub(crate) key: Key,
    /// The key expression's span, when one was written.
    pub(crate) key_span: Option<Span>,
    pub(crate) key_type: Option<Type>,
    pub(crate) returns: Returns,
    pub(crate) mode: Mode,
    /// A plain `fn`: blocking loads, inline.
    pub(crate) sync: bool,
    pub(crate) params: Vec<Param>,
    pub(crate) cloned: Vec<Cloned>,
}

fn value<T: Copy>(set: &Option<Set<T>>) -> Option<T> {
    set.as_ref().map(|s| s.value)
}

pub(crate) fn check(args: Args, func: &ItemFn, cx: &mut Ctxt) -> Option<Plan> {
    let sig = &func.sig;
    // A plain `fn`: its callers are threads, which block on a running load.
    let sync = sig.asyncness.is_none();
    if sync {
        let needs_runtime = [
            args.timeout.as_ref().map(|s| &s.name),
            args.admission.as_ref().map(|s| &s.name),
            args.clone.as_ref().map(|s| &s.name),
        ];
        for name in needs_runtime.into_iter().flatten() {
            cx.error(
                name,
                format!("`{name}` needs an async runtime, and this is a plain `fn`, whose callers block their threads: make it an `async fn`, or drop `{name}`"),
            );
        }
        if let Some(mode) = args.mode.as_ref().filter(|m| m.value == LoadMode::Detached) {
            cx.error(
                &mode.name,
                "a plain `fn` runs in its caller's thread: `mode = detached` needs an `async fn`",
            );
        }
    }
    if let Some(constness) = &sig.constness {
        cx.error(constness, "#[cached] cannot go on a `const fn`");
    }
    if !matches!(sig.safety, syn::Safety::Default) {
        cx.error(
            sig.fn_token,
            "#[cached] cannot go on an `unsafe fn`: the body runs inside a closure",
        );
    }

    let fresh = match &args.fresh {
        Some(fresh) if fresh.value.is_zero() => {
            cx.error_at(fresh.value.span, "`fresh` must be longer than zero");
            None
        }
        Some(fresh) => Some(fresh.value),
        None if args.written.iter().any(|w| w == "fresh") => None,
        None => {
            cx.error_at(
                Span::call_site(),
                "#[cached] needs `fresh`, how long a value is served as is: `#[cached(fresh = \"60s\")]`",
            );
            None
        }
    };
    if let Some(timeout) = args.timeout.as_ref().filter(|t| t.value.is_zero()) {
        cx.error_at(timeout.value.span, "`timeout` must be longer than zero");
    }
    if let Some(lease) = args.lease.as_ref().filter(|t| t.value.is_zero()) {
        cx.error_at(lease.value.span, "`lease` must be longer than zero");
    }
    if let Some(capacity) = args.capacity.as_ref().filter(|c| c.value == 0) {
        cx.error(&capacity.name, "`capacity` must be at least 1");
    }

    let (receiver, params) = params(func, cx);
    let returns = returns(&sig.output, value(&args.returns), cx);
    if let Some(Returns::Value(_)) = &returns {
        let needs_error_path = [
            args.timeout
                .as_ref()
                .map(|s| (&s.name, "a caller whose deadline passes gets an error")),
            args.stale_if_error
                .as_ref()
                .map(|s| (&s.name, "it is about what to do when the function fails")),
            args.admission.as_ref().map(|s| {
                (
                    &s.name,
                    "a caller shed by the admission limit gets an error",
                )
            }),
        ];
        for (name, why) in needs_error_path.into_iter().flatten() {
            cx.error(
                name,
                format!("`{name}` needs an error path, and this function returns a plain value ({why}): return `Result<T, E>` with `E: From<stampede::Error>`"),
            );
        }
        if let Some(map) = &args.map_error {
            cx.error(&map.name, "`map_error` needs an error type: this function returns a plain value, not a `Result`");
        }
        if let Some(kept) = &args.cache_errors {
            cx.error(&kept.name, "`cache_errors` keeps chosen errors, and this function returns a plain value, not a `Result`");
        }
    }

    if let (Some(set), Some(returns)) = (&args.cache_none, &returns) {
        let cached = match returns {
            Returns::Result { ok, .. } => ok,
            Returns::Value(ty) => ty,
        };
        let option = match cached {
            Type::Path(path) if path.qself.is_none() => path
                .path
                .segments
                .last()
                .is_some_and(|last| last.ident == "Option"),
            _ => false,
        };
        if !option {
            cx.error(
                &set.name,
                "`cache_none` is about functions that return an `Option` (or `Result<Option<T>, E>`); this one caches another type",
            );
        }
    }
    let (cloned, accounted) = cloned(&args, receiver.as_ref(), &params, cx);
    let key = key(&args, &receiver, &params, &accounted, cx);
    let mode = mode(
        func,
        receiver.as_ref(),
        &params,
        &accounted,
        args.mode.as_ref(),
        cx,
    );

    let (key, key_span) = key?;
    Some(Plan {
        fresh: fresh?,
        stale: value(&args.stale),
        stale_if_error: value(&args.stale_if_error),
        timeout: value(&args.timeout),
        lease: value(&args.lease),
        coalesce: value(&args.coalesce).unwrap_or(true),
        xfetch: value(&args.xfetch),
        jitter: value(&args.jitter),
        admission: args.admission.map(|s| s.value),
        name: args.name.map(|s| s.value),
        version: value(&args.version),
        capacity: value(&args.capacity),
        local: args.local.is_some(),
        trait_impl: args.trait_impl.is_some(),
        skip_none: value(&args.cache_none) == Some(false),
        cache_errors: args.cache_errors.map(|s| s.value),
        map_error: args.map_error.map(|s| s.value),
        source_version: args.source_version.map(|s| s.value),
        key,
        key_span,
        key_type: args.key_type.map(|s| s.value),
        returns: returns?,
        mode: if sync { Mode::Inline } else { mode },
        sync,
        params,
        cloned,
    })
}

/// `clone(...)`: borrowed arguments (or `self`) the origin gets an owned clone of. Returns
/// the clones, and every known name the option lists (accounted for in the key check even
/// when its clone is refused, so one mistake is one error).
fn cloned(
    args: &Args,
    receiver: Option<&syn::Receiver>,
    params: &[Param],
    cx: &mut Ctxt,
) -> (Vec<Cloned>, BTreeSet<String>) {
    let mut cloned = Vec::new();
    let mut accounted = BTreeSet::new();
    for written in args.clone.iter().flat_map(|s| s.value.iter()) {
        let text = written.to_string();
        let target = if text == "self" {
            receiver.map(|r| (receiver_type(r), true))
        } else {
            params
                .iter()
                .find(|p| p.ident() == written)
                .map(|p| (p.ty.clone(), false))
        };
        let Some((ty, is_self)) = target else {
            let mut list: Vec<String> = params.iter().map(|p| format!("`{}`", p.ident())).collect();
            if receiver.is_some() {
                list.insert(0, "`self`".to_owned());
            }
            cx.error(
                written,
                format!(
                    "`{text}` is not an argument of this function (its arguments: {})",
                    list.join(", ")
                ),
            );
            continue;
        };
        if !accounted.insert(text.clone()) {
            cx.error(written, format!("`{text}` is cloned twice"));
            continue;
        }
        let by_ref = match &ty {
            Type::Reference(r) if r.mutability.is_some() => {
                // `&mut self` is refused on its own, under the receiver.
                if !is_self {
                    cx.error(
                        written,
                        format!("`{text}` is `&mut`: the origin would change a clone, not the caller's value; `clone` takes shared borrows (`&T`)"),
                    );
                }
                continue;
            }
            Type::Reference(_) => true,
            _ if is_self => false,
            _ => {
                cx.error(
                    written,
                    format!("`{text}` is owned already, so the origin can take it as it is: `clone` is for borrowed arguments (`{text}: &T`) and `self`"),
                );
                continue;
            }
        };
        cloned.push(Cloned {
            written: written.clone(),
            by_ref,
            is_self,
        });
    }
    (cloned, accounted)
}

/// The type of a receiver as written out: `&Self` for `&self`, `Self` for `self`.
fn receiver_type(receiver: &syn::Receiver) -> Type {
    match &receiver.kind {
        ReceiverKind::Reference(_, _, None) => syn::parse_quote!(&Self),
        ReceiverKind::Reference(_, _, Some(_)) => syn::parse_quote!(&mut Self),
        ReceiverKind::Typed(_, ty) => (**ty).clone(),
        _ => syn::parse_quote!(Self),
    }
}

/// The receiver (if any) and the named arguments.
fn params(func: &ItemFn, cx: &mut Ctxt) -> (Option<syn::Receiver>, Vec<Param>) {
    let mut receiver = None;
    let mut params = Vec::new();
    for input in &func.sig.inputs {
        match input {
            FnArg::Receiver(r) => {
                if let ReceiverKind::Reference(_, _, Some(mutability)) = &r.kind {
                    cx.error(
                        mutability,
                        "a cached method cannot take `&mut self`: on a hit the body does not run, so its changes to `self` would happen only on misses; take `&self`",
                    );
                }
                receiver = Some(r.clone());
            }
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                    if let Type::Reference(syn::TypeReference {
                        mutability: Some(mutability),
                        ..
                    }) = &*typed.ty
                    {
                        cx.error(
                            mutability,
                            format!("a cached function cannot take `&mut` arguments: on a hit the body does not run, so its changes to `{}` would happen only on misses; take it by `&` or by value", pat.ident),
                        );
                    }
                    params.push(Param {
                        pat: pat.clone(),
                        by_ref: matches!(&*typed.ty, Type::Reference(_)),
                        ty: (*typed.ty).clone(),
                    });
                }
                other => cx.error(
                    other,
                    "give this argument a plain name (`arg: Type`): #[cached] names arguments in `key` and `skip`",
                ),
            },
        }
    }
    (receiver, params)
}

/// Whether the function is fallible. A type whose last segment is `Result` (`Result<T, E>`,
/// `io::Result<T>`) or that `returns = result` marks is one; anything else is a plain
/// value. Either reading is confirmed by the compiler (see the `Fallible` bound and the
/// plain-value probe in `expand`), so an alias can never turn errors into cached values.
fn returns(output: &ReturnType, declared: Option<Returning>, cx: &mut Ctxt) -> Option<Returns> {
    let ty = match output {
        ReturnType::Type(_, ty) => (**ty).clone(),
        ReturnType::Default => {
            cx.error_at(
                Span::call_site(),
                "a cached function must return the value to cache; this one returns `()`",
            );
            return None;
        }
    };
    if let Type::Tuple(unit) = &ty {
        if unit.elems.is_empty() {
            cx.error(
                &ty,
                "a cached function must return the value to cache; this one returns `()`",
            );
            return None;
        }
    }
    let last = match &ty {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    };
    let named_result = last.is_some_and(|last| last.ident == "Result");
    let fallible = match declared {
        Some(Returning::Result) => true,
        Some(Returning::Value) => false,
        None => named_result,
    };
    if !fallible {
        return Some(Returns::Value(ty));
    }
    let types: Vec<&Type> = match last.map(|last| &last.arguments) {
        Some(PathArguments::AngleBracketed(generics)) if named_result => generics
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let projection = |assoc: &str| -> Type {
        let assoc = Ident::new(assoc, Span::call_site());
        syn::parse_quote!(<#ty as ::stampede::__private::Fallible>::#assoc)
    };
    Some(match types.as_slice() {
        [ok, err] => Returns::Result {
            ty: ty.clone(),
            ok: (*ok).clone(),
            err: (*err).clone(),
        },
        // An alias such as `io::Result<T>`: the compiler resolves it.
        _ => Returns::Result {
            ok: projection("Value"),
            err: projection("Error"),
            ty,
        },
    })
}

/// Key accounting: every argument, `self` included, is in the key or in `skip`.
fn key(
    args: &Args,
    receiver: &Option<syn::Receiver>,
    params: &[Param],
    cloned: &BTreeSet<String>,
    cx: &mut Ctxt,
) -> Option<(Key, Option<Span>)> {
    let mut names: Vec<(String, Span)> = params
        .iter()
        .map(|p| (p.ident().to_string(), p.ident().span()))
        .collect();
    if let Some(r) = receiver {
        names.insert(0, ("self".to_owned(), r.self_token.span));
    }
    let known: BTreeSet<&str> = names.iter().map(|(n, _)| n.as_str()).collect();

    let mut skipped = BTreeSet::new();
    for name in args.skip.iter().flat_map(|s| s.value.iter()) {
        let text = name.to_string();
        if !known.contains(text.as_str()) {
            let list = names
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            cx.error(
                name,
                format!("`{text}` is not an argument of this function (its arguments: {list})"),
            );
        } else if !skipped.insert(text.clone()) {
            cx.error(name, format!("`{text}` is skipped twice"));
        }
    }

    let in_key: BTreeSet<String> = match &args.key {
        Some(key) => key_usage::variables_used(&key.value),
        // The default key is every argument not skipped; `self` is never keyed implicitly.
        None => names
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !skipped.contains(n) && !cloned.contains(n) && n != "self")
            .collect(),
    };
    let mut complete = true;
    if args.key.is_none() {
        complete &= !params
            .iter()
            .filter(|p| in_key.contains(&p.ident().to_string()))
            .any(|p| borrowed_handle(p, cx));
    }
    for (name, span) in &names {
        let keyed = in_key.contains(name);
        let skips = skipped.contains(name) || cloned.contains(name);
        if keyed && skipped.contains(name) && args.key.is_some() {
            let at = args
                .skip
                .iter()
                .flat_map(|s| s.value.iter())
                .find(|i| *i == name.as_str());
            let message = format!(
                "`{name}` is both in the key and skipped: remove it from one (it is in the key if it changes the result)"
            );
            match at {
                Some(at) => cx.error(at, message),
                None => cx.error_at(*span, message),
            }
            complete = false;
        } else if !keyed && !skips {
            let message = if name == "self" {
                "`self` is neither in the key nor skipped: write `skip(self)` if the result does not depend on it, or use it in `key = ...` (with `key_type`)".to_owned()
            } else {
                format!(
                    "`{name}` is neither in the key nor skipped: if it changes the result, add it to the key (`key = (..., {name})`); if it does not, write `skip({name})`"
                )
            };
            cx.error_at(*span, message);
            complete = false;
        }
    }
    if !complete {
        return None;
    }

    let position = |ident: &Ident| params.iter().position(|p| p.ident() == ident);
    match &args.key {
        None => {
            let parts = (0..params.len())
                .filter(|&i| {
                    let name = params[i].ident().to_string();
                    !skipped.contains(&name) && !cloned.contains(&name)
                })
                .collect();
            Some((Key::Params(parts), None))
        }
        Some(key) => {
            let span = Some(syn::spanned::Spanned::span(&key.value));
            let parts: Option<Vec<usize>> = match &key.value {
                Expr::Path(p) => p.path.get_ident().and_then(position).map(|i| vec![i]),
                Expr::Paren(p) => match &*p.expr {
                    Expr::Path(p) => p.path.get_ident().and_then(position).map(|i| vec![i]),
                    _ => None,
                },
                Expr::Tuple(t) => t
                    .elems
                    .iter()
                    .map(|e| match e {
                        Expr::Path(p) => p.path.get_ident().and_then(position),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            };
            match (parts, &args.key_type) {
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
    }
}

/// The most common mistake: a borrowed handle (`db: &PgPool`) left in the default key,
/// which would hold a clone of it. A borrowed argument of a named type other than the
/// usual borrowed keys (`&str`, `&[T]`, `&Path`, …) is one error under the argument, asking
/// which it is, instead of the key bounds failing on a pool. A key written out
/// (`key = (id, query)`) keys it as asked.
fn borrowed_handle(param: &Param, cx: &mut Ctxt) -> bool {
    const KEYS: &[&str] = &[
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
    if path.qself.is_some() || generic || KEYS.iter().any(|k| last.ident == k) {
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

/// Detached when nothing borrows: no receiver, no reference, lifetime, `impl Trait` or
/// generic type parameter in any argument; `mode = …` chooses explicitly, and detached is
/// refused where an argument borrows (a task of its own cannot hold a borrow).
fn mode(
    func: &ItemFn,
    receiver: Option<&syn::Receiver>,
    params: &[Param],
    cloned: &BTreeSet<String>,
    declared: Option<&Set<LoadMode>>,
    cx: &mut Ctxt,
) -> Mode {
    struct Borrows<'a> {
        generics: &'a BTreeSet<String>,
        /// A borrow the origin's own task could not hold.
        borrows: bool,
        /// A generic type, which may or may not borrow.
        generic: bool,
    }
    impl<'ast> Visit<'ast> for Borrows<'_> {
        fn visit_type_reference(&mut self, _: &'ast syn::TypeReference) {
            self.borrows = true;
        }
        fn visit_lifetime(&mut self, _: &'ast syn::Lifetime) {
            self.borrows = true;
        }
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.generic = true;
        }
        fn visit_type_path(&mut self, path: &'ast syn::TypePath) {
            if let Some(ident) = path.path.get_ident() {
                if self.generics.contains(&ident.to_string()) {
                    self.generic = true;
                }
            }
            syn::visit::visit_type_path(self, path);
        }
    }
    let generics: BTreeSet<String> = func
        .sig
        .generics
        .type_params()
        .map(|t| t.ident.to_string())
        .collect();
    let mut borrowing: Vec<(Span, String)> = Vec::new();
    let mut generic = false;
    if let Some(receiver) = receiver.filter(|_| !cloned.contains("self")) {
        borrowing.push((receiver.self_token.span, "self".to_owned()));
    }
    for param in params {
        if cloned.contains(&param.ident().to_string()) {
            continue;
        }
        let mut borrows = Borrows {
            generics: &generics,
            borrows: false,
            generic: false,
        };
        borrows.visit_type(&param.ty);
        if borrows.borrows {
            borrowing.push((param.ident().span(), param.ident().to_string()));
        }
        generic |= borrows.generic;
    }
    match declared.map(|d| d.value) {
        Some(LoadMode::Inline) => Mode::Inline,
        Some(LoadMode::Detached) => {
            for (span, arg) in &borrowing {
                cx.error_at(
                    *span,
                    format!("`mode = detached` runs the origin as its own task, which may outlive this call, so it cannot hold the borrowed `{arg}`: write `clone({arg})` if it is cheap to clone (a pool, a client, an `Arc`), pass it owned, or drop `mode = detached`"),
                );
            }
            Mode::Detached
        }
        None if borrowing.is_empty() && !generic => Mode::Detached,
        None => Mode::Inline,
    }
}
