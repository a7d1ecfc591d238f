//! The attribute's grammar: `#[cached(name = value, flag, list(...), ...)]` into a typed
//! model, every mistake collected rather than stopping at the first.
use crate::ctxt::Ctxt;
use proc_macro2::{Span, TokenStream};
use stampede_settings as settings;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token, Type};

/// A duration checked at compile time, in milliseconds.
#[derive(Clone, Copy)]
pub(crate) struct Millis {
    pub(crate) millis: u64,
    pub(crate) span: Span,
}

/// A setting with the span of the option's name, for errors about the option itself.
pub(crate) struct Set<T> {
    pub(crate) name: Ident,
    pub(crate) value: T,
}

#[derive(Default)]
pub(crate) struct Args {
    /// Every option written, valid or not (and, for a renamed one, the name it has
    /// here), so a bad `fresh` is not also reported as a missing one.
    pub(crate) written: Vec<String>,
    pub(crate) fresh: Option<Set<Millis>>,
    pub(crate) stale: Option<Set<Millis>>,
    pub(crate) stale_if_error: Option<Set<Millis>>,
    pub(crate) timeout: Option<Set<Millis>>,
    pub(crate) lease: Option<Set<Millis>>,
    pub(crate) coalesce: Option<Set<bool>>,
    pub(crate) xfetch: Option<Set<f64>>,
    pub(crate) jitter: Option<Set<f64>>,
    pub(crate) key: Option<Set<Expr>>,
    pub(crate) key_type: Option<Set<Type>>,
    pub(crate) skip: Option<Set<Vec<Ident>>>,
    pub(crate) clone: Option<Set<Vec<Ident>>>,
    pub(crate) admission: Option<Set<LitStr>>,
    pub(crate) name: Option<Set<LitStr>>,
    pub(crate) version: Option<Set<u32>>,
    pub(crate) capacity: Option<Set<u64>>,
    pub(crate) local: Option<Set<()>>,
    pub(crate) trait_impl: Option<Set<()>>,
    pub(crate) cache_none: Option<Set<bool>>,
    pub(crate) cache_errors: Option<Set<CacheErrors>>,
    pub(crate) map_error: Option<Set<Path>>,
    pub(crate) source_version: Option<Set<Expr>>,
    pub(crate) returns: Option<Set<Returning>>,
    pub(crate) mode: Option<Set<LoadMode>>,
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

/// `cache_errors(if = path, for = "5s")`: negative caching.
#[derive(Clone)]
pub(crate) struct CacheErrors {
    /// A `fn(&E) -> bool` choosing the errors to keep.
    pub(crate) keep: Path,
    pub(crate) ttl: Millis,
}

/// One option as written, before its value is interpreted.
struct RawOption {
    name: Ident,
    value: RawValue,
}

enum RawValue {
    Flag,
    Expr(Expr),
    Type(Type),
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

const OPTIONS: &str = "fresh, stale, stale_if_error, coalesce, xfetch, jitter, key, key_type, skip, clone, timeout, admission, lease, name, version, capacity, local, cache_none, cache_errors, trait_impl, map_error, source_version, returns, mode";

/// Names other caching crates use, with the option that means the same here.
const RENAMED: &[(&str, &str)] = &[
    ("ttl", "fresh"),
    ("time", "fresh"),
    ("time_to_live", "fresh"),
    ("expire", "fresh"),
    ("max_age", "fresh"),
    ("stale_while_revalidate", "stale"),
    ("fail_safe", "stale_if_error"),
    ("size", "capacity"),
    ("max_capacity", "capacity"),
    ("convert", "key"),
    ("skip_args", "skip"),
    ("sync_writes", "coalesce"),
    ("single_flight", "coalesce"),
    ("beta", "xfetch(beta = ...)"),
    ("early_refresh", "xfetch"),
    ("deadline", "timeout"),
    ("semaphore", "admission"),
];

impl Args {
    pub(crate) fn parse(tokens: TokenStream, cx: &mut Ctxt) -> Args {
        let mut args = Args::default();
        let options = match syn::parse::Parser::parse2(
            Punctuated::<RawOption, Token![,]>::parse_terminated,
            tokens,
        ) {
            Ok(options) => options,
            Err(error) => {
                cx.push(error);
                return args;
            }
        };
        for option in options {
            args.interpret(option, cx);
        }
        args.check_horizon(cx);
        args
    }

    /// The deadlines the runtime derives must fit, as its policy builder checks too.
    fn check_horizon(&self, cx: &mut Ctxt) {
        let Some(fresh) = &self.fresh else { return };
        let millis = |d: &Option<Set<Millis>>| {
            std::time::Duration::from_millis(d.as_ref().map_or(0, |d| d.value.millis))
        };
        let jitter = self.jitter.as_ref().map_or(0.0, |j| j.value);
        let fits = settings::horizon(
            std::time::Duration::from_millis(fresh.value.millis),
            jitter,
            millis(&self.stale),
            millis(&self.stale_if_error),
        );
        if let Err(message) = fits {
            cx.error_at(fresh.value.span, message);
        }
    }

    fn interpret(&mut self, option: RawOption, cx: &mut Ctxt) {
        let RawOption { name, value } = option;
        let key = name.to_string();
        self.written.push(key.clone());
        macro_rules! set {
            ($field:ident, $parsed:expr) => {{
                if self.$field.is_some() {
                    cx.error(&name, format!("`{key}` is given twice"));
                } else if let Some(value) = $parsed {
                    self.$field = Some(Set {
                        name: name.clone(),
                        value,
                    });
                }
            }};
        }
        match key.as_str() {
            "fresh" => set!(fresh, duration(&name, value, cx)),
            "stale" => set!(stale, duration(&name, value, cx)),
            "stale_if_error" => set!(stale_if_error, duration(&name, value, cx)),
            "timeout" => set!(timeout, duration(&name, value, cx)),
            "lease" => set!(lease, duration(&name, value, cx)),
            "coalesce" => set!(coalesce, boolean(&name, value, cx)),
            "cache_none" => set!(cache_none, boolean(&name, value, cx)),
            "cache_errors" => set!(cache_errors, cache_errors(&name, value, cx)),
            "xfetch" => set!(xfetch, xfetch(&name, value, cx)),
            "jitter" => set!(jitter, jitter(&name, value, cx)),
            "key" => set!(key, expr(&name, value, cx)),
            "key_type" => set!(
                key_type,
                match value {
                    RawValue::Type(ty) => Some(ty),
                    _ => {
                        cx.error(
                            &name,
                            "write `key_type = Type`, the type of the `key` expression",
                        );
                        None
                    }
                }
            ),
            "skip" => set!(
                skip,
                names(
                    &name,
                    value,
                    cx,
                    "write `skip(arg, ...)` with the arguments that do not change the result"
                )
            ),
            "clone" => set!(
                clone,
                names(
                    &name,
                    value,
                    cx,
                    "write `clone(arg, ...)` with the borrowed arguments (or `self`) the function may run on an owned clone of"
                )
            ),
            "admission" => set!(admission, string(&name, value, cx, "admission = \"db\"")),
            "name" => set!(name, string(&name, value, cx, "name = \"user-profile\"")),
            "version" => set!(version, integer::<u32>(&name, value, cx, "version = 2")),
            "capacity" => set!(
                capacity,
                integer::<u64>(&name, value, cx, "capacity = 10_000").filter(|&capacity| {
                    // Zero is the checker's (`capacity` must be at least 1); the ceiling is here.
                    let at_most = settings::capacity("`capacity`", capacity.max(1));
                    at_most.map_err(|message| cx.error(&name, message)).is_ok()
                })
            ),
            "local" => set!(
                local,
                match value {
                    RawValue::Flag => Some(()),
                    _ => {
                        cx.error(&name, "`local` takes no value: write `local`");
                        None
                    }
                }
            ),
            "trait_impl" => set!(
                trait_impl,
                match value {
                    RawValue::Flag => Some(()),
                    _ => {
                        cx.error(&name, "`trait_impl` takes no value: write `trait_impl`");
                        None
                    }
                }
            ),
            "map_error" => {
                set!(
                    map_error,
                    match value {
                        RawValue::Expr(Expr::Path(path)) if path.qself.is_none() => Some(path.path),
                        _ => {
                            cx.error(&name, "write `map_error = path::to::function`, a `fn(stampede::Error) -> E`");
                            None
                        }
                    }
                )
            }
            "source_version" => set!(
                source_version,
                match value {
                    RawValue::Expr(expr @ (Expr::Path(_) | Expr::Closure(_))) => Some(expr),
                    _ => {
                        cx.error(
                            &name,
                            "write `source_version = path::to::function` or a closure, a `fn(&V) -> u64` over the cached value",
                        );
                        None
                    }
                }
            ),
            "returns" => set!(
                returns,
                choice(
                    &name,
                    &value,
                    cx,
                    &[("result", Returning::Result), ("value", Returning::Value)],
                    "write `returns = result` (only `Ok` is cached) or `returns = value` (a plain value, cached as is)",
                )
            ),
            "mode" => set!(
                mode,
                choice(
                    &name,
                    &value,
                    cx,
                    &[("inline", LoadMode::Inline), ("detached", LoadMode::Detached)],
                    "write `mode = inline` (the origin runs in the caller's task) or `mode = detached` (as its own task)",
                )
            ),
            other => match RENAMED.iter().find(|(old, _)| *old == other) {
                Some((old, new)) => {
                    self.written.push((*new).to_owned());
                    cx.error(&name, format!("`{old}` is `{new}` here"));
                }
                None => cx.error(
                    &name,
                    format!("unknown option `{other}`; the options are: {OPTIONS}"),
                ),
            },
        }
    }
}

fn expr(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Expr> {
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
    let word = match value {
        RawValue::Expr(Expr::Path(path)) if path.qself.is_none() => path.path.get_ident(),
        _ => None,
    };
    let chosen = word.and_then(|word| words.iter().find(|(w, _)| word == w));
    if chosen.is_none() {
        cx.error(name, help);
    }
    chosen.map(|(_, choice)| *choice)
}

fn literal(value: &RawValue) -> Option<&Lit> {
    match value {
        RawValue::Expr(Expr::Lit(ExprLit { lit, .. })) => Some(lit),
        _ => None,
    }
}

fn duration(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<Millis> {
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
pub(crate) fn parse_duration(name: &str, text: &str) -> Result<u64, String> {
    let duration = settings::parse_duration(text)?;
    let duration = settings::within_horizon(&format!("`{name}`"), duration)?;
    Ok(duration.as_millis() as u64)
}

fn boolean(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<bool> {
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
    let parsed =
        syn::parse::Parser::parse2(Punctuated::<RawOption, Token![,]>::parse_terminated, tokens);
    parsed.map_err(|error| cx.push(error)).ok()
}

fn xfetch(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<f64> {
    let tokens = match value {
        RawValue::Flag => return Some(1.0),
        RawValue::List(tokens) => tokens,
        _ => {
            cx.error(name, "write `xfetch` or `xfetch(beta = 1.0)`");
            return None;
        }
    };
    let options = sub_options(tokens, cx)?;
    let mut beta = None;
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
        if let RawValue::Expr(Expr::Unary(negative)) = &option.value {
            if matches!(negative.op, syn::UnOp::Neg(_)) {
                cx.error(
                    negative,
                    "`beta` must be above zero (1.0 is the usual choice, larger refreshes earlier): it scales how far ahead of expiry a hot key may be refreshed, and a negative β would put that after expiry, so no refresh would ever be early",
                );
                continue;
            }
        }
        match literal(&option.value).and_then(number) {
            Some((b, span)) => match settings::xfetch_beta("`beta`", b) {
                Ok(b) => beta = Some(b),
                Err(message) => cx.error_at(span, message),
            },
            None => cx.error(&option.name, "write `beta = 1.0`"),
        }
    }
    Some(beta.unwrap_or(1.0))
}

fn cache_errors(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<CacheErrors> {
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
                keep = Some(match option.value {
                    RawValue::Expr(Expr::Path(path)) if path.qself.is_none() => Some(path.path),
                    _ => {
                        cx.error(
                            &option.name,
                            "write `if = path::to::fn`, a `fn(&E) -> bool`",
                        );
                        None
                    }
                })
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

fn jitter(name: &Ident, value: RawValue, cx: &mut Ctxt) -> Option<f64> {
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

fn integer<T: std::str::FromStr>(
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

fn string(name: &Ident, value: RawValue, cx: &mut Ctxt, example: &str) -> Option<LitStr> {
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
fn names(name: &Ident, value: RawValue, cx: &mut Ctxt, help: &str) -> Option<Vec<Ident>> {
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

impl Millis {
    pub(crate) fn is_zero(&self) -> bool {
        self.millis == 0
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations_read_the_shared_grammar_in_milliseconds() {
        assert_eq!(parse_duration("fresh", "250ms"), Ok(250));
        assert_eq!(parse_duration("fresh", "1m30s"), Ok(90_000));
        assert_eq!(parse_duration("fresh", "1h 1m"), Ok(3_660_000));
        assert_eq!(parse_duration("fresh", "1_000ms"), Ok(1_000));
        assert_eq!(
            parse_duration("stale", "36501d"),
            Err("`stale` must be at most 36500d".to_owned())
        );
    }

    #[test]
    fn the_attribute_reads_the_one_duration_grammar() {
        use stampede_settings::examples::{DURATIONS, NOT_DURATIONS};
        for &(text, millis) in DURATIONS {
            assert_eq!(parse_duration("stale", text), Ok(millis), "{text}");
        }
        for &(text, why) in NOT_DURATIONS {
            let message = parse_duration("stale", text).unwrap_err();
            assert!(
                message.starts_with(&format!("`{text}` is not a duration: {why}")),
                "{text}: {message}"
            );
        }
    }
}
