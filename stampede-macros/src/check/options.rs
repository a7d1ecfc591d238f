//! Options that are well formed on their own but out of range, missing, or at odds with
//! the function they are on (a plain `fn`, a plain return value).
use crate::args::{Args, LoadMode, Millis};
use crate::ctxt::Ctxt;
use crate::plan::Returns;
use proc_macro2::Span;
use syn::Type;

/// A plain `fn` blocks its caller's thread: nothing that needs an async runtime.
pub(super) fn check_plain_fn_options(args: &Args, cx: &mut Ctxt) {
    let needs_runtime = [
        args.timeout.as_ref().map(|s| &s.name),
        args.load_timeout.as_ref().map(|s| &s.name),
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

/// A priority orders loads for an admission's permits: without one it would do nothing.
pub(super) fn check_priority(args: &Args, cx: &mut Ctxt) {
    if let (Some(priority), None) = (&args.priority, &args.admission) {
        cx.error(
            &priority.name,
            "`priority` decides who gives way for an admission's permits, and this function names no admission: add `admission = \"db\"`, or drop `priority`",
        );
    }
}

/// `fresh` is required and above zero; a `fresh` written wrong is reported once, where
/// it was read.
pub(super) fn check_fresh(args: &Args, cx: &mut Ctxt) -> Option<Millis> {
    match &args.fresh {
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
    }
}

/// `timeout`, `load_timeout` and `lease` above zero, `capacity` at least 1.
pub(super) fn check_positive_settings(args: &Args, cx: &mut Ctxt) {
    if let Some(timeout) = args.timeout.as_ref().filter(|t| t.value.is_zero()) {
        cx.error_at(timeout.value.span, "`timeout` must be longer than zero");
    }
    if let Some(timeout) = args.load_timeout.as_ref().filter(|t| t.value.is_zero()) {
        cx.error_at(
            timeout.value.span,
            "`load_timeout` must be longer than zero",
        );
    }
    if let Some(lease) = args.lease.as_ref().filter(|t| t.value.is_zero()) {
        cx.error_at(lease.value.span, "`lease` must be longer than zero");
    }
    if let Some(capacity) = args.capacity.as_ref().filter(|c| c.value == 0) {
        cx.error(&capacity.name, "`capacity` must be at least 1");
    }
}

/// A function that returns a plain value has no error path: nothing that would answer
/// a caller with an error, or keep, map or serve around errors.
pub(super) fn check_error_path_options(args: &Args, returns: &Returns, cx: &mut Ctxt) {
    let Returns::Value(_) = returns else { return };
    let needs_error_path = [
        args.timeout
            .as_ref()
            .map(|s| (&s.name, "a caller whose deadline passes gets an error")),
        args.load_timeout.as_ref().map(|s| {
            (
                &s.name,
                "a load abandoned past its deadline answers with an error",
            )
        }),
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
        cx.error(
            &map.name,
            "`map_error` needs an error type: this function returns a plain value, not a `Result`",
        );
    }
    if let Some(kept) = &args.cache_errors {
        cx.error(&kept.name, "`cache_errors` keeps chosen errors, and this function returns a plain value, not a `Result`");
    }
}

/// `cache_none` only where the cached value is an `Option`.
pub(super) fn check_cache_none(args: &Args, returns: &Returns, cx: &mut Ctxt) {
    let Some(set) = &args.cache_none else { return };
    // A batch keeps a key its origin did not find as `None`.
    if args.batch.is_some() {
        return;
    }
    let option = match returns.cached() {
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
            "`cache_none` is about functions that return an `Option` (or `Result<Option<T>, E>`), and `batch` functions; this one caches another type",
        );
    }
}
