//! How each kind of option value is read: durations, numbers, strings, flags, lists of
//! names, and the settings inside `xfetch(...)` and `cache_errors(...)`. Each reader
//! reports a value written wrong under the token at fault and returns `None`.
use super::grammar::{parse_options, RawOption, RawValue};
use crate::ctxt::Ctxt;
use proc_macro2::{Span, TokenStream};
use stampede_settings as settings;
use syn::parse::ParseStream;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token, Type};

/// A duration checked at compile time, in milliseconds.
#[derive(Clone, Copy)]
pub(crate) struct Millis {
    pub(crate) millis: u64,
    pub(crate) span: Span,
}

impl Millis {
    pub(crate) fn is_zero(&self) -> bool {
        self.millis == 0
    }
}

/// `returns = result | value`: what the return type is, where the compiler cannot be
/// asked before the cache's types are written (an alias, a generic).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returning {
    Result,
    Value,
}

/// `mode = inline | detached`: where the leader runs the origin.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoadMode {
    Inline,
    Detached,
}

/// `priority = low | normal | high`: who gives way when admission permits are short.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Priority {
    Low,
    Normal,
    High,
}

/// `cache_errors(if = path, for = "5s")`: negative caching.
pub(crate) struct CacheErrors {
    /// A `fn(&E) -> bool` choosing the errors to keep.
    pub(crate) keep: Path,
    pub(crate) ttl: Millis,
}

pub(super) fn expr(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Expr> {
    match value {
        RawValue::Expr(expr) => Some(expr),
        _ => {
            cx.error(name, format!("write `{name} = <expression>`"));
            None
        }
    }
}

/// One of a few bare words, such as `result` in `returns = result`.
fn choice<T: Copy>(
    name: &Ident,
    value: &RawValue,
    cx: &mut Ctxt,
    words: &[(&str, T)],
    help: &str,
) -> Option<T> {
    let word = plain_path(value).and_then(Path::get_ident);
    let chosen = word.and_then(|word| words.iter().find(|(w, _)| word == w));
    if chosen.is_none() {
        cx.error(name, help);
    }
    chosen.map(|(_, choice)| *choice)
}

pub(super) fn returning(name: &Ident, value: &RawValue, cx: &mut Ctxt) -> Option<Returning> {
    let words = [("result", Returning::Result), ("value", Returning::Value)];
    let help = "write `returns = result` (only `Ok` is cached) or `returns = value` (a plain value, cached as is)";
    choice(name, value, cx, &words, help)
}

pub(super) fn load_mode(name: &Ident, value: &RawValue, cx: &mut Ctxt) -> Option<LoadMode> {
    let words = [
        ("inline", LoadMode::Inline),
        ("detached", LoadMode::Detached),
    ];
    let help = "write `mode = inline` (the origin runs in the caller's task) or `mode = detached` (it outlives the caller)";
    choice(name, value, cx, &words, help)
}

pub(super) fn priority(name: &Ident, value: &RawValue, cx: &mut Ctxt) -> Option<Priority> {
    let words = [
        ("low", Priority::Low),
        ("normal", Priority::Normal),
        ("high", Priority::High),
    ];
    let help = "write `priority = low` (shed first when admission permits are short), `priority = normal` or `priority = high` (may take the admission's reserved permits)";
    choice(name, value, cx, &words, help)
}

/// A path with no `<T as Trait>::` qualification: a function's, or a bare word.
fn plain_path(value: &RawValue) -> Option<&Path> {
    match value {
        RawValue::Expr(Expr::Path(path)) if path.qself.is_none() => Some(&path.path),
        _ => None,
    }
}

/// A function named by its path, as `map_error` and `cache_errors(if = ...)` take one.
pub(super) fn function_path(
    name: &Ident,
    value: &RawValue,
    cx: &mut Ctxt,
    help: &str,
) -> Option<Path> {
    let path = plain_path(value).cloned();
    if path.is_none() {
        cx.error(name, help);
    }
    path
}

/// `source_version = path` or a closure, typed where it is used.
pub(super) fn source_version(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Expr> {
    match value {
        RawValue::Expr(expr @ (Expr::Path(_) | Expr::Closure(_))) => Some(expr),
        _ => {
            cx.error(
                name,
                "write `source_version = path::to::function` or a closure, a `fn(&V) -> u64` (or `-> i64`) over the cached value",
            );
            None
        }
    }
}

/// `tags = <expression>`, over the keyed arguments, typed where it is used.
pub(super) fn tags(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Expr> {
    match value {
        RawValue::Expr(expr) => Some(expr),
        _ => {
            cx.error(
                name,
                "write `tags = [format!(\"tenant:{tenant}\")]`, an expression over the keyed arguments whose items are strings (`impl AsRef<str>`)",
            );
            None
        }
    }
}

/// `key_type = Type`.
pub(super) fn key_type(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Type> {
    match value {
        RawValue::Type(ty) => Some(ty),
        _ => {
            cx.error(
                name,
                "write `key_type = Type`, the type of the `key` expression",
            );
            None
        }
    }
}

/// An option written alone, such as `local`.
pub(super) fn flag(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<()> {
    match value {
        RawValue::Flag => Some(()),
        _ => {
            cx.error(name, format!("`{name}` takes no value: write `{name}`"));
            None
        }
    }
}

/// `capacity = n`: zero is the checker's (`capacity` must be at least 1); the ceiling is
/// here.
pub(super) fn capacity(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<u64> {
    integer::<u64>(name, value, cx, "capacity = 10_000").filter(|&capacity| {
        let at_most = settings::capacity("`capacity`", capacity.max(1));
        at_most.map_err(|message| cx.error(name, message)).is_ok()
    })
}

fn literal(value: &RawValue) -> Option<&Lit> {
    match value {
        RawValue::Expr(Expr::Lit(ExprLit { lit, .. })) => Some(lit),
        _ => None,
    }
}

pub(super) fn duration(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Millis> {
    let example = format!("{name} = \"30s\"");
    let Some(lit) = literal(&value) else {
        cx.error(name, format!("`{name}` is a duration: write `{example}`"));
        return None;
    };
    let text = match lit {
        Lit::Str(text) => text,
        Lit::Int(number) => {
            cx.error(
                number,
                format!(
                    "durations are strings with a unit: write `{name} = \"{}s\"`",
                    number.base10_digits()
                ),
            );
            return None;
        }
        other => {
            cx.error(other, format!("`{name}` is a duration: write `{example}`"));
            return None;
        }
    };
    match parse_duration(&name.to_string(), &text.value()) {
        Ok(millis) => Some(Millis {
            millis,
            span: text.span(),
        }),
        Err(message) => {
            cx.error(text, message);
            None
        }
    }
}

/// `"1m30s"` into milliseconds, by the grammar the runtime's file and environment read,
/// within the longest deadline a policy may derive.
fn parse_duration(name: &str, text: &str) -> Result<u64, String> {
    let duration = settings::parse_duration(text)?;
    let duration = settings::within_horizon(&format!("`{name}`"), duration)?;
    Ok(duration.as_millis() as u64)
}

pub(super) fn boolean(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<bool> {
    match &value {
        RawValue::Flag => Some(true),
        _ => match literal(&value) {
            Some(Lit::Bool(b)) => Some(b.value),
            _ => {
                cx.error(name, format!("write `{name}` or `{name} = false`"));
                None
            }
        },
    }
}

/// The `name = value` settings inside an option's parentheses (`xfetch(beta = 1.0)`); a
/// list that does not parse is reported, and the option dropped.
fn sub_options(tokens: TokenStream, cx: &mut Ctxt) -> Option<Punctuated<RawOption, Token![,]>> {
    parse_options(tokens).map_err(|error| cx.push(error)).ok()
}

/// `xfetch`, `xfetch = false` or `xfetch(beta = 1.0)`: β, or `None` for off (`false`, or a
/// β of 0, as the runtime's file and builder read them).
pub(super) fn xfetch(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Option<f64>> {
    const HELP: &str = "write `xfetch`, `xfetch(beta = 1.0)` or `xfetch = false`";
    let tokens = match value {
        RawValue::Flag => return Some(Some(1.0)),
        RawValue::List(tokens) => tokens,
        value => {
            return match literal(&value) {
                Some(Lit::Bool(on)) => Some(on.value.then_some(1.0)),
                _ => {
                    cx.error(name, HELP);
                    None
                }
            };
        }
    };
    let options = sub_options(tokens, cx)?;
    let mut beta = Some(1.0);
    for option in options {
        if option.name != "beta" {
            cx.error(
                &option.name,
                format!(
                    "unknown xfetch setting `{}`; the setting is `beta`",
                    option.name
                ),
            );
            continue;
        }
        if let RawValue::Expr(Expr::Unary(negative)) = &option.value
            && matches!(negative.op, syn::UnOp::Neg(_))
        {
            cx.error(
                    negative,
                    "`beta` must be above zero (1.0 is the usual choice, larger refreshes earlier; 0 turns XFetch off): it scales how far ahead of expiry a hot key may be refreshed, and a negative β would put that after expiry, so no refresh would ever be early",
                );
            continue;
        }
        match literal(&option.value).and_then(number) {
            Some((b, span)) => match settings::xfetch_beta("`beta`", b) {
                Ok(b) => beta = b,
                Err(message) => cx.error_at(span, message),
            },
            None => cx.error(&option.name, "write `beta = 1.0`"),
        }
    }
    Some(beta)
}

pub(super) fn cache_errors(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<CacheErrors> {
    const HELP: &str = "write `cache_errors(if = path::to::fn, for = \"5s\")`, with a `fn(&E) -> bool` choosing the errors to keep";
    let RawValue::List(tokens) = value else {
        cx.error(name, HELP);
        return None;
    };
    let options = sub_options(tokens, cx)?;
    // Each setting: `None` when missing, `Some(None)` when written wrong (already reported).
    let (mut keep, mut ttl) = (None, None);
    for option in options {
        match option.name.to_string().as_str() {
            "if" => {
                let help = "write `if = path::to::fn`, a `fn(&E) -> bool`";
                keep = Some(function_path(&option.name, &option.value, cx, help));
            }
            "for" => {
                let span = option.name.span();
                ttl = Some(duration(&option.name, option.value, cx).filter(|ttl| {
                    let positive = ttl.millis > 0;
                    if !positive {
                        cx.error_at(span, "`for` must be longer than zero");
                    }
                    positive
                }));
            }
            other => cx.error(
                &option.name,
                format!("unknown cache_errors setting `{other}`; the settings are `if` and `for`"),
            ),
        }
    }
    match (keep, ttl) {
        (Some(Some(keep)), Some(Some(ttl))) => Some(CacheErrors { keep, ttl }),
        (None, _) | (_, None) => {
            cx.error(name, HELP);
            None
        }
        _ => None,
    }
}

pub(super) fn jitter(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<f64> {
    match literal(&value).and_then(number) {
        Some((j, span)) => settings::jitter("`jitter`", j)
            .map_err(|message| cx.error_at(span, message))
            .ok(),
        None => {
            cx.error(name, "write `jitter = 0.15`, a fraction within 0.0..=0.5");
            None
        }
    }
}

fn number(lit: &Lit) -> Option<(f64, Span)> {
    match lit {
        Lit::Float(f) => f.base10_parse().ok().map(|v| (v, f.span())),
        Lit::Int(i) => i.base10_parse::<u64>().ok().map(|v| (v as f64, i.span())),
        _ => None,
    }
}

pub(super) fn integer<T: std::str::FromStr>(
    name: &Ident,
    value: RawValue,
    cx: &mut Ctxt,
    example: &str,
) -> Option<T>
where
    T::Err: std::fmt::Display,
{
    match literal(&value) {
        Some(Lit::Int(int)) => match int.base10_parse::<T>() {
            Ok(n) => Some(n),
            Err(error) => {
                cx.error(int, format!("`{name}`: {error}"));
                None
            }
        },
        _ => {
            cx.error(
                name,
                format!("`{name}` is a whole number: write `{example}`"),
            );
            None
        }
    }
}

pub(super) fn string(
    name: &Ident,
    value: RawValue,
    cx: &mut Ctxt,
    example: &str,
) -> Option<LitStr> {
    match literal(&value) {
        Some(Lit::Str(text)) if !text.value().trim().is_empty() => Some(text.clone()),
        Some(Lit::Str(text)) => {
            cx.error(text, format!("`{name}` must not be empty"));
            None
        }
        _ => {
            cx.error(name, format!("`{name}` is a string: write `{example}`"));
            None
        }
    }
}

/// A list of argument names: `skip(db, self)`, `clone(db)`.
pub(super) fn names(
    name: &Ident,
    value: RawValue,
    cx: &mut Ctxt,
    help: &str,
) -> Option<Vec<Ident>> {
    let RawValue::List(tokens) = value else {
        cx.error(name, help);
        return None;
    };
    let names = |input: ParseStream| {
        Punctuated::<Ident, Token![,]>::parse_terminated_with(input, syn::ext::IdentExt::parse_any)
    };
    match syn::parse::Parser::parse2(names, tokens) {
        Ok(names) => Some(names.into_iter().collect()),
        Err(error) => {
            cx.push(error);
            None
        }
    }
}

/// `batch(ids)`, with optional settings: `batch(ids, single = price, max_batch = 200,
/// batch_window = "2ms")`.
pub(crate) struct BatchArgs {
    /// The argument that holds the keys.
    pub(crate) keys: Ident,
    /// The single-key function to write beside the batch one.
    pub(crate) single: Option<Ident>,
    /// Keys per origin call.
    pub(crate) max_batch: Option<u64>,
    /// How long keys are gathered.
    pub(crate) window: Option<Millis>,
}

pub(super) fn batch(name: &Ident, value: RawValue, cx: &mut Ctxt, help: &str) -> Option<BatchArgs> {
    let RawValue::List(tokens) = value else {
        cx.error(name, help);
        return None;
    };
    let parse = |input: ParseStream| -> syn::Result<BatchArgs> {
        let keys: Ident = input.call(syn::ext::IdentExt::parse_any)?;
        let mut batch = BatchArgs {
            keys,
            single: None,
            max_batch: None,
            window: None,
        };
        while input.parse::<Option<Token![,]>>()?.is_some() && !input.is_empty() {
            let setting: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            match setting.to_string().as_str() {
                "single" => batch.single = Some(input.parse()?),
                "max_batch" => {
                    let keys: syn::LitInt = input.parse()?;
                    let value = keys.base10_parse::<u64>()?;
                    settings::max_batch("max_batch", value).map_err(|why| syn::Error::new(keys.span(), why))?;
                    batch.max_batch = Some(value);
                }
                "batch_window" => {
                    let text: LitStr = input.parse()?;
                    let window = settings::parse_duration(&text.value())
                        .and_then(|window| settings::batch_window("batch_window", window))
                        .map_err(|why| syn::Error::new(text.span(), why))?;
                    batch.window = Some(Millis {
                        millis: window.as_millis() as u64,
                        span: text.span(),
                    });
                }
                other => {
                    return Err(syn::Error::new(
                        setting.span(),
                        format!("unknown `batch` setting `{other}`; the settings are `single = price` (also a function for one key), `max_batch = 100` (keys per origin call) and `batch_window = \"1ms\"` (how long keys are gathered)"),
                    ))
                }
            }
        }
        Ok(batch)
    };
    match syn::parse::Parser::parse2(parse, tokens) {
        Ok(batch) => Some(batch),
        Err(error) => {
            cx.push(error);
            None
        }
    }
}

#[cfg(test)]
mod tests;
