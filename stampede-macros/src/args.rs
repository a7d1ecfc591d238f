//! The attribute's grammar: `#[cached(name = value, flag, list(...), ...)]` into a typed
//! model, every mistake collected rather than stopping at the first. The raw grammar is
//! in `grammar.rs`, the reading of each kind of value in `values.rs`.
use crate::ctxt::Ctxt;
use grammar::RawOption;
use proc_macro2::TokenStream;
use stampede_settings as settings;
use syn::{Expr, Ident, LitStr, Path, Type};
pub(crate) use values::{BatchArgs, CacheErrors, LoadMode, Millis, Priority, Returning};

mod grammar;
mod values;

/// A setting with the span of the option's name, for errors about the option itself.
pub(crate) struct Set<T> {
    pub(crate) name: Ident,
    pub(crate) value: T,
}

/// The options as written, each read into its type: `None` where it is absent, or written
/// wrong (and reported).
#[derive(Default)]
pub(crate) struct Args {
    /// Every option written, valid or not (and, for a renamed one, the name it has
    /// here), so a bad `fresh` is not also reported as a missing one.
    pub(crate) written: Vec<String>,
    pub(crate) fresh: Option<Set<Millis>>,
    pub(crate) stale: Option<Set<Millis>>,
    pub(crate) stale_if_error: Option<Set<Millis>>,
    pub(crate) timeout: Option<Set<Millis>>,
    pub(crate) load_timeout: Option<Set<Millis>>,
    pub(crate) lease: Option<Set<Millis>>,
    pub(crate) coalesce: Option<Set<bool>>,
    /// β, or `None` where it is written off (`xfetch = false`, `beta = 0`).
    pub(crate) xfetch: Option<Set<Option<f64>>>,
    pub(crate) jitter: Option<Set<f64>>,
    pub(crate) key: Option<Set<Expr>>,
    pub(crate) key_type: Option<Set<Type>>,
    pub(crate) skip: Option<Set<Vec<Ident>>>,
    pub(crate) clone: Option<Set<Vec<Ident>>>,
    pub(crate) admission: Option<Set<LitStr>>,
    pub(crate) priority: Option<Set<Priority>>,
    pub(crate) admission_group: Option<Set<Expr>>,
    pub(crate) name: Option<Set<LitStr>>,
    pub(crate) version: Option<Set<u32>>,
    pub(crate) capacity: Option<Set<u64>>,
    pub(crate) local: Option<Set<()>>,
    pub(crate) trait_impl: Option<Set<()>>,
    pub(crate) cache_none: Option<Set<bool>>,
    pub(crate) cache_errors: Option<Set<CacheErrors>>,
    pub(crate) map_error: Option<Set<Path>>,
    pub(crate) source_version: Option<Set<Expr>>,
    /// `tags = [...]`: an expression over the keyed arguments, the entry's tags.
    pub(crate) tags: Option<Set<Expr>>,
    pub(crate) returns: Option<Set<Returning>>,
    pub(crate) mode: Option<Set<LoadMode>>,
    /// `batch(ids)`: the argument whose elements are each an entry of their own.
    pub(crate) batch: Option<Set<BatchArgs>>,
}

// What to write instead, for the options whose value is written wrong.
const SKIP_HELP: &str = "write `skip(arg, ...)` with the arguments that do not change the result";
const CLONE_HELP: &str = "write `clone(arg, ...)` with the borrowed arguments (or `self`) the function may run on an owned clone of";
const BATCH_HELP: &str = "write `batch(ids)` with the argument that holds the keys (`Vec<K>`, `&[K]`, `HashSet<K>` or `BTreeSet<K>`), or `batch(ids, single = price)` to also have a function for one key";
const MAP_ERROR_HELP: &str = "write `map_error = path::to::function`, a `fn(stampede::Error) -> E`";

/// Every option, for the message about an unknown one.
const OPTIONS: &str = "fresh, stale, stale_if_error, coalesce, xfetch, jitter, key, key_type, skip, clone, timeout, load_timeout, admission, priority, admission_group, lease, name, version, capacity, local, cache_none, cache_errors, trait_impl, map_error, source_version, tags, returns, mode, batch";

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
    ("origin_timeout", "load_timeout"),
    ("refresh_timeout", "load_timeout"),
    ("semaphore", "admission"),
];

impl Args {
    pub(crate) fn parse(tokens: TokenStream, cx: &mut Ctxt) -> Args {
        let mut args = Args::default();
        let options = match grammar::parse_options(tokens) {
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

    /// One option into its field, its value read by its kind.
    fn interpret(&mut self, option: RawOption, cx: &mut Ctxt) {
        let RawOption { name, value } = option;
        let option = name.to_string();
        self.written.push(option.clone());
        let name = &name;
        if let Some(field) = self.duration_field(&option) {
            return set(field, name, cx, |cx| values::duration(name, value, cx));
        }
        match option.as_str() {
            "coalesce" => set(&mut self.coalesce, name, cx, |cx| {
                values::boolean(name, value, cx)
            }),
            "cache_none" => set(&mut self.cache_none, name, cx, |cx| {
                values::boolean(name, value, cx)
            }),
            "cache_errors" => set(&mut self.cache_errors, name, cx, |cx| {
                values::cache_errors(name, value, cx)
            }),
            "xfetch" => set(&mut self.xfetch, name, cx, |cx| {
                values::xfetch(name, value, cx)
            }),
            "jitter" => set(&mut self.jitter, name, cx, |cx| {
                values::jitter(name, value, cx)
            }),
            "key" => set(&mut self.key, name, cx, |cx| values::expr(name, value, cx)),
            "key_type" => set(&mut self.key_type, name, cx, |cx| {
                values::key_type(name, value, cx)
            }),
            "skip" => set(&mut self.skip, name, cx, |cx| {
                values::names(name, value, cx, SKIP_HELP)
            }),
            "clone" => set(&mut self.clone, name, cx, |cx| {
                values::names(name, value, cx, CLONE_HELP)
            }),
            "admission" => set(&mut self.admission, name, cx, |cx| {
                values::string(name, value, cx, "admission = \"db\"")
            }),
            "admission_group" => set(&mut self.admission_group, name, cx, |cx| {
                values::expr(name, value, cx)
            }),
            "priority" => set(&mut self.priority, name, cx, |cx| {
                values::priority(name, &value, cx)
            }),
            "name" => set(&mut self.name, name, cx, |cx| {
                values::string(name, value, cx, "name = \"user-profile\"")
            }),
            "version" => set(&mut self.version, name, cx, |cx| {
                values::integer::<u32>(name, value, cx, "version = 2")
            }),
            "capacity" => set(&mut self.capacity, name, cx, |cx| {
                values::capacity(name, value, cx)
            }),
            "local" => set(&mut self.local, name, cx, |cx| {
                values::flag(name, value, cx)
            }),
            "trait_impl" => set(&mut self.trait_impl, name, cx, |cx| {
                values::flag(name, value, cx)
            }),
            "map_error" => set(&mut self.map_error, name, cx, |cx| {
                values::function_path(name, &value, cx, MAP_ERROR_HELP)
            }),
            "source_version" => set(&mut self.source_version, name, cx, |cx| {
                values::source_version(name, value, cx)
            }),
            "tags" => set(&mut self.tags, name, cx, |cx| values::tags(name, value, cx)),
            "returns" => set(&mut self.returns, name, cx, |cx| {
                values::returning(name, &value, cx)
            }),
            "mode" => set(&mut self.mode, name, cx, |cx| {
                values::load_mode(name, &value, cx)
            }),
            "batch" => set(&mut self.batch, name, cx, |cx| {
                values::batch(name, value, cx, BATCH_HELP)
            }),
            other => self.unknown(name, other, cx),
        }
    }

    /// The field of a duration option (`fresh = "60s"`).
    fn duration_field(&mut self, option: &str) -> Option<&mut Option<Set<Millis>>> {
        Some(match option {
            "fresh" => &mut self.fresh,
            "stale" => &mut self.stale,
            "stale_if_error" => &mut self.stale_if_error,
            "timeout" => &mut self.timeout,
            "load_timeout" => &mut self.load_timeout,
            "lease" => &mut self.lease,
            _ => return None,
        })
    }

    /// An option of another name: one that other caching crates use is named as it is
    /// here, and counts as written.
    fn unknown(&mut self, name: &Ident, other: &str, cx: &mut Ctxt) {
        match RENAMED.iter().find(|(old, _)| *old == other) {
            Some((old, new)) => {
                self.written.push((*new).to_owned());
                cx.error(name, format!("`{old}` is `{new}` here"));
            }
            None => cx.error(
                name,
                format!("unknown option `{other}`; the options are: {OPTIONS}"),
            ),
        }
    }
}

/// Fills an option's field once: a second writing is reported, and its value not read.
fn set<T>(
    field: &mut Option<Set<T>>,
    name: &Ident,
    cx: &mut Ctxt,
    read: impl FnOnce(&mut Ctxt) -> Option<T>,
) {
    if field.is_some() {
        cx.error(name, format!("`{name}` is given twice"));
    } else if let Some(value) = read(cx) {
        *field = Some(Set {
            name: name.clone(),
            value,
        });
    }
}

#[cfg(test)]
mod tests;
