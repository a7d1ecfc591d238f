//! The checked model of one `#[cached]` function: what the checks accept and the
//! expansion reads. Every field is known to be consistent with the function it came from.
use crate::args::{CacheErrors, Millis, Priority};
use proc_macro2::Span;
use syn::{Expr, Ident, LitStr, PatIdent, Path, Type};

/// How the leader runs the origin (ARCHITECTURE.md, rules: flights, *leader and cancellation*).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Every argument is owned: the origin outlives its callers.
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

/// What the function returns, and so what its cache holds.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Returns {
    /// A `Result` (named `Result`, or `returns = result`): only `Ok` is cached. The
    /// compiler confirms it is one.
    Result { ty: Type, ok: Type, err: Type },
    /// A plain value: cannot fail. The compiler confirms it is no `Result` in disguise
    /// (an alias), which would otherwise cache its errors.
    Value(Type),
}

impl Returns {
    /// The type of the values the cache holds: the `Ok` type, or the plain value's.
    pub(crate) fn cached(&self) -> &Type {
        match self {
            Returns::Result { ok, .. } => ok,
            Returns::Value(ty) => ty,
        }
    }
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

/// `batch(ids)`: each element of one argument is an entry of its own, and the function
/// returns the values it found by key.
pub(crate) struct Batch {
    /// The argument's index in `params`.
    pub(crate) param: usize,
    /// How the argument holds the keys.
    pub(crate) collection: Collection,
    /// The key type of one element.
    pub(crate) element: Type,
    /// The key type of the returned map, which must be `element`.
    pub(crate) key: Type,
    /// The value type of the returned map.
    pub(crate) value: Type,
    /// `single = price`: the one-key function written beside this one.
    pub(crate) single: Option<Ident>,
    /// `max_batch = 200`: keys per origin call.
    pub(crate) max_batch: Option<u64>,
    /// `batch_window = "2ms"`: how long keys are gathered.
    pub(crate) window: Option<Millis>,
}

/// The collections a batch argument may be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Collection {
    /// `Vec<K>`, `HashSet<K>`, `BTreeSet<K>`: collected from the keys asked for.
    Owned,
    /// `&[K]`: a `Vec` of the keys asked for, lent.
    Slice,
}

/// An expression of the key's arguments, evaluated with each argument read back from the
/// key: `tags = [...]` (an entry's tags, when it is stored) and `admission_group = ...`
/// (a load's key group, when it queues).
pub(crate) struct FromKey {
    pub(crate) expr: Expr,
    /// The arguments the expression uses (their indices in `params`), each in the key.
    pub(crate) uses: Vec<usize>,
}

/// A checked attribute, ready to expand.
pub(crate) struct Plan {
    pub(crate) fresh: Millis,
    pub(crate) stale: Option<Millis>,
    pub(crate) stale_if_error: Option<Millis>,
    pub(crate) timeout: Option<Millis>,
    pub(crate) load_timeout: Option<Millis>,
    pub(crate) lease: Option<Millis>,
    pub(crate) coalesce: bool,
    pub(crate) xfetch: Option<f64>,
    pub(crate) jitter: Option<f64>,
    pub(crate) admission: Option<LitStr>,
    pub(crate) priority: Option<Priority>,
    pub(crate) name: Option<LitStr>,
    pub(crate) version: Option<u32>,
    pub(crate) capacity: Option<u64>,
    pub(crate) local: bool,
    /// In an `impl Trait for T`, which cannot take an associated constant the trait does
    /// not declare: no handle.
    pub(crate) trait_impl: bool,
    /// `cache_none = false`: a `None` is the answer of its load, never stored.
    pub(crate) skip_none: bool,
    /// `cache_errors(if = ..., for = ...)`: negative caching.
    pub(crate) cache_errors: Option<CacheErrors>,
    pub(crate) map_error: Option<Path>,
    /// `source_version = f`: a `fn(&V) -> u64` (or `-> i64`) over the cached value.
    pub(crate) source_version: Option<Expr>,
    /// `tags = [...]`: the entry's tags, computed from its key when it is stored.
    pub(crate) tags: Option<FromKey>,
    /// `admission_group = ...`: a load's key group, from its key.
    pub(crate) admission_group: Option<FromKey>,
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
    pub(crate) batch: Option<Batch>,
}
