//! `tags = ...` and `admission_group = ...`: an entry's tags are computed from its key when
//! it is stored, and a load's group from its key when it queues, so each expression may use
//! only the arguments the key holds, and only when the key holds them as themselves (not
//! through a `key = ...` expression they cannot be read back from).
use super::key_usage;
use crate::args::Args;
use crate::ctxt::Ctxt;
use crate::plan::{FromKey, Key, Param};
use syn::Receiver;

/// The tags the attribute declares: `Some(None)` without any, `None` after an error.
pub(super) fn check_tags(
    args: &Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    key: &Key,
    cx: &mut Ctxt,
) -> Option<Option<FromKey>> {
    let Some(tags) = &args.tags else {
        return Some(None);
    };
    from_key(
        &tags.value,
        "tags",
        "an entry is tagged from its key when it is stored",
        receiver,
        params,
        key,
        cx,
    )
}

/// `admission_group = <expression>`: the key group, read back from the key as `tags` are.
pub(super) fn check_admission_group(
    args: &Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    key: &Key,
    cx: &mut Ctxt,
) -> Option<Option<FromKey>> {
    let Some(group) = &args.admission_group else {
        return Some(None);
    };
    if args.admission.is_none() {
        cx.error(
            &group.name,
            "`admission_group` shares an admission's permits between key groups, and this function names no admission: add `admission = \"db\"`, or drop `admission_group`",
        );
        return None;
    }
    from_key(
        &group.value,
        "admission_group",
        "a load's group is read from its key when it queues",
        receiver,
        params,
        key,
        cx,
    )
}

/// An expression of the keyed arguments (`what`), which the expansion evaluates with
/// each argument it uses read back from the key: the arguments it uses, or an error
/// under each one the key does not hold.
fn from_key(
    expr: &syn::Expr,
    what: &str,
    why: &str,
    receiver: Option<&Receiver>,
    params: &[Param],
    key: &Key,
    cx: &mut Ctxt,
) -> Option<Option<FromKey>> {
    let is_argument = |name: &str| {
        (name == "self" && receiver.is_some()) || params.iter().any(|p| p.ident() == name)
    };
    let mut uses = Vec::new();
    let mut fine = true;
    for (name, span) in key_usage::variables_used_at(expr) {
        if !is_argument(&name) {
            // A constant, a function, or a name the expression binds itself.
            continue;
        }
        let parts = match key {
            Key::Params(parts) => parts,
            Key::Expr { .. } => {
                cx.error_at(
                    span,
                    format!("{what} must be computable from the key, and `{name}` cannot be read back from this one: `key = ...` is an expression, not a list of arguments; key by the arguments themselves (`key = (..., {name})`) to use `{name}` in `{what}`"),
                );
                fine = false;
                continue;
            }
        };
        match parts.iter().copied().find(|&i| *params[i].ident() == name) {
            Some(index) => uses.push(index),
            None => {
                let keyed: Vec<String> = parts
                    .iter()
                    .map(|&i| format!("`{}`", params[i].ident()))
                    .collect();
                let keyed = if keyed.is_empty() {
                    "it has none".to_owned()
                } else {
                    keyed.join(", ")
                };
                cx.error_at(
                    span,
                    format!("`{name}` is not in the key, and {what} must be computable from the key ({why}): use only the key's arguments in `{what}` ({keyed}), or add `{name}` to the key"),
                );
                fine = false;
            }
        }
    }
    fine.then(|| {
        Some(FromKey {
            expr: expr.clone(),
            uses,
        })
    })
}
