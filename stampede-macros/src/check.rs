//! What the attribute refuses: keys that leave out an input, options the return type
//! cannot honour, signatures the cache cannot hold. [`check`] runs the checks in order;
//! every mistake goes to one [`Ctxt`], each under the token at fault, and a [`Plan`] comes
//! out only when the function can be expanded.
use crate::args::{Args, Millis, Set};
use crate::ctxt::Ctxt;
use crate::plan::{Cloned, FromKey, Key, Mode, Param, Plan, Returns};
use proc_macro2::Span;
use syn::ItemFn;

mod batch;
mod clone;
mod from_key;
mod key;
mod key_usage;
mod mode;
mod options;
mod signature;

/// Every check, in the order its errors are reported.
pub(crate) fn check(args: Args, func: &ItemFn, cx: &mut Ctxt) -> Option<Plan> {
    let sig = &func.sig;
    // A plain `fn`: its callers are threads, which block on a running load.
    let sync = sig.asyncness.is_none();
    if sync {
        options::check_plain_fn_options(&args, cx);
    }
    signature::check_qualifiers(sig, cx);
    let fresh = options::check_fresh(&args, cx);
    options::check_positive_settings(&args, cx);
    options::check_priority(&args, cx);
    let (receiver, params) = signature::check_arguments(sig, cx);
    let returns = signature::check_return_type(&sig.output, value(&args.returns), cx);
    if let Some(returns) = &returns {
        options::check_error_path_options(&args, returns, cx);
        options::check_cache_none(&args, returns, cx);
    }
    let (cloned, clone_listed) = clone::check_clones(&args, receiver.as_ref(), &params, cx);
    let batch = batch::check_batch(
        &args,
        &params,
        returns.as_ref(),
        sync,
        receiver.is_some(),
        cx,
    );
    let key = key::check_key_covers_arguments(&args, receiver.as_ref(), &params, &clone_listed, cx);
    // Against the key as checked: with an argument unaccounted for, there is none yet.
    let tags = match &key {
        Some((key, _)) => from_key::check_tags(&args, receiver.as_ref(), &params, key, cx),
        None => Some(None),
    };
    let admission_group = match &key {
        Some((key, _)) => {
            from_key::check_admission_group(&args, receiver.as_ref(), &params, key, cx)
        }
        None => Some(None),
    };
    let mode = match &args.batch {
        Some(keys) => mode::batch_mode(
            sig,
            receiver.as_ref(),
            &params,
            &clone_listed,
            &keys.value.keys.to_string(),
            cx,
        ),
        None => mode::leader_mode(
            sig,
            receiver.as_ref(),
            &params,
            &clone_listed,
            args.mode.as_ref(),
            cx,
        ),
    };
    let (key, key_span) = key?;
    let batch = batch?;
    let tags = tags?;
    let admission_group = admission_group?;
    let checked = Checked {
        fresh: fresh?,
        key,
        key_span,
        returns: returns?,
        // A plain `fn` runs the origin in the calling thread, whatever its arguments.
        mode: if sync { Mode::Inline } else { mode },
        sync,
        params,
        cloned,
        batch,
        tags,
        admission_group,
    };
    Some(plan(args, checked))
}

/// What the checks read from the function and its options, beside the options taken as
/// they are.
struct Checked {
    fresh: Millis,
    key: Key,
    key_span: Option<Span>,
    returns: Returns,
    mode: Mode,
    sync: bool,
    params: Vec<Param>,
    cloned: Vec<Cloned>,
    batch: Option<crate::plan::Batch>,
    tags: Option<FromKey>,
    admission_group: Option<FromKey>,
}

fn plan(args: Args, checked: Checked) -> Plan {
    Plan {
        fresh: checked.fresh,
        stale: value(&args.stale),
        stale_if_error: value(&args.stale_if_error),
        timeout: value(&args.timeout),
        load_timeout: value(&args.load_timeout),
        lease: value(&args.lease),
        coalesce: value(&args.coalesce).unwrap_or(true),
        xfetch: value(&args.xfetch).flatten(),
        jitter: value(&args.jitter),
        admission: args.admission.map(|s| s.value),
        priority: value(&args.priority),
        name: args.name.map(|s| s.value),
        version: value(&args.version),
        capacity: value(&args.capacity),
        local: args.local.is_some(),
        trait_impl: args.trait_impl.is_some(),
        skip_none: value(&args.cache_none) == Some(false),
        cache_errors: args.cache_errors.map(|s| s.value),
        map_error: args.map_error.map(|s| s.value),
        source_version: args.source_version.map(|s| s.value),
        tags: checked.tags,
        admission_group: checked.admission_group,
        key: checked.key,
        key_span: checked.key_span,
        key_type: args.key_type.map(|s| s.value),
        returns: checked.returns,
        mode: checked.mode,
        sync: checked.sync,
        params: checked.params,
        cloned: checked.cloned,
        batch: checked.batch,
    }
}

fn value<T: Copy>(set: &Option<Set<T>>) -> Option<T> {
    set.as_ref().map(|s| s.value)
}
