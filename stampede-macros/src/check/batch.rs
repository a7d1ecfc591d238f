//! `batch(ids)`: one argument holds the keys, each element an entry of its own, and the
//! function returns the values it found by key.
use crate::args::Args;
use crate::ctxt::Ctxt;
use crate::plan::{Batch, Collection, Param, Returns};
use syn::{GenericArgument, PathArguments, Type};

const COLLECTIONS: &str = "`Vec<K>`, `&[K]`, `HashSet<K>` or `BTreeSet<K>`";

/// The batch the attribute declares: `Some(None)` without one, `None` after an error.
pub(super) fn check_batch(
    args: &Args,
    params: &[Param],
    returns: Option<&Returns>,
    sync: bool,
    method: bool,
    cx: &mut Ctxt,
) -> Option<Option<Batch>> {
    let Some(batch) = &args.batch else {
        return Some(None);
    };
    let named = &batch.value.keys;
    let mut fine = true;
    if sync {
        cx.error(
            &batch.name,
            "`batch` loads keys concurrently, each a load of its own: it needs an `async fn`",
        );
        fine = false;
    }
    if let Some(key) = &args.key {
        cx.error(&key.name, format!("`batch({named})` keys each element of `{named}` with the other keyed arguments: `key = ...` cannot apply; `skip` the arguments that do not change the result"));
        fine = false;
    }
    if args
        .skip
        .iter()
        .flat_map(|s| s.value.iter())
        .any(|s| s == named)
    {
        cx.error(
            named,
            format!("`{named}` holds the keys of the batch: it cannot be skipped"),
        );
        fine = false;
    }
    let Some(index) = params.iter().position(|p| p.ident() == named) else {
        cx.error(
            named,
            format!("`batch({named})` names no argument of this function"),
        );
        return None;
    };
    let param = &params[index];
    let (collection, element) = match collection(&param.ty) {
        Some(found) => found,
        None => {
            cx.error(
                &param.ty,
                format!("`batch({named})` needs the keys as a collection: {COLLECTIONS}"),
            );
            return None;
        }
    };
    let (key, value) = match returns {
        Some(returns) => match map_types(returns.cached()) {
            Some(types) => types,
            None => {
                cx.error(returns.cached(), "a `batch` function returns the values it found by key: `HashMap<K, V>` or `BTreeMap<K, V>`, in a `Result` if it can fail");
                return None;
            }
        },
        None => return None,
    };
    if let (Some(single), true) = (&batch.value.single, method) {
        cx.error(single, "`single = ...` writes a free function beside this one; it is not available on methods yet");
        fine = false;
    }
    fine.then_some(Some(Batch {
        single: batch.value.single.clone(),
        max_batch: batch.value.max_batch,
        window: batch.value.window,
        param: index,
        collection,
        element,
        key,
        value,
    }))
}

/// How a type holds keys, and their type.
fn collection(ty: &Type) -> Option<(Collection, Type)> {
    match ty {
        Type::Reference(reference) => match &*reference.elem {
            Type::Slice(slice) if reference.mutability.is_none() => {
                Some((Collection::Slice, (*slice.elem).clone()))
            }
            _ => None,
        },
        Type::Path(_) => {
            let (name, args) = last_segment(ty)?;
            ["Vec", "HashSet", "BTreeSet"]
                .contains(&name.as_str())
                .then(|| Some((Collection::Owned, args.first()?.clone())))?
        }
        _ => None,
    }
}

/// The key and value types of a `HashMap<K, V>` or `BTreeMap<K, V>`.
fn map_types(ty: &Type) -> Option<(Type, Type)> {
    let (name, args) = last_segment(ty)?;
    (["HashMap", "BTreeMap"].contains(&name.as_str()) && args.len() >= 2)
        .then(|| (args[0].clone(), args[1].clone()))
}

/// A path type's last name and its type arguments.
fn last_segment(ty: &Type) -> Option<(String, Vec<Type>)> {
    let Type::Path(path) = ty else { return None };
    if path.qself.is_some() {
        return None;
    }
    let last = path.path.segments.last()?;
    let args = match &last.arguments {
        PathArguments::AngleBracketed(generics) => generics
            .args
            .iter()
            .filter_map(|a| match a {
                GenericArgument::Type(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Some((last.ident.to_string(), args))
}
