//! `tags = ...`: an entry's tags are computed from its key when it is stored, so the
//! expression may use only the arguments the key holds, and only when the key holds them
//! as themselves (not through a `key = ...` expression they cannot be read back from).
use super::key_usage;
use crate::args::Args;
use crate::ctxt::Ctxt;
use crate::plan::{Key, Param, Tags};
use syn::Receiver;

/// The tags the attribute declares: `Some(None)` without any, `None` after an error.
pub(super) fn check_tags(
    args: &Args,
    receiver: Option<&Receiver>,
    params: &[Param],
    key: &Key,
    cx: &mut Ctxt,
) -> Option<Option<Tags>> {
    let Some(tags) = &args.tags else {
        return Some(None);
    };
    let is_argument = |name: &str| {
        (name == "self" && receiver.is_some()) || params.iter().any(|p| p.ident() == name)
    };
    let mut uses = Vec::new();
    let mut fine = true;
    for (name, span) in key_usage::variables_used_at(&tags.value) {
        if !is_argument(&name) {
            // A constant, a function, or a name the expression binds itself.
            continue;
        }
        let parts = match key {
            Key::Params(parts) => parts,
            Key::Expr { .. } => {
                cx.error_at(
                    span,
                    format!("tags must be computable from the key, and `{name}` cannot be read back from this one: `key = ...` is an expression, not a list of arguments; key by the arguments themselves (`key = (..., {name})`) to use `{name}` in `tags`"),
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
                    format!("`{name}` is not in the key, and tags must be computable from the key (an entry is tagged from its key when it is stored): use only the key's arguments in `tags` ({keyed}), or add `{name}` to the key"),
                );
                fine = false;
            }
        }
    }
    fine.then(|| {
        Some(Tags {
            expr: tags.value.clone(),
            uses,
        })
    })
}
