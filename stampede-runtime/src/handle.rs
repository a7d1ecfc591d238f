//! The handle `#[cached]` emits beside each function (`LOAD_PROFILE` for `load_profile`):
//! invalidation and stats for a cache whose calls go through the function itself.
//!
//! A cache's identity is its site (one per expansion of the attribute, so two functions
//! that one `macro_rules!` writes are two sites) plus the instantiation it runs in (so
//! `Repo::<A>::get` and `Repo::<B>::get` are two caches). The function keeps its cache in
//! a static of its own, so a call costs one load and one pointer compare; the handle, a
//! constant that cannot name that static, finds the same cache by the same identity.
use crate::bounds::{CacheError, CacheKey, LocalValue, SourceVersion};
use crate::cache::Cache;
use crate::error::Error;
use crate::stats::Stats;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// One cached function's cache, reachable without calling the function.
///
/// The cache it names is created once per process and instantiation, by whichever comes
/// first: the function's first call or the handle's first use. In a generic `impl`, each
/// instantiation's handle (`Repo::<A>::GET`) reaches that instantiation's cache.
///
/// `B` builds a key from the function's own arguments, for [`Handle::invalidate_args`]:
/// a `fn` pointer with the keyed arguments' types, or [`ExpressionKey`] where the key is
/// an expression.
pub struct Handle<K, V, E = Error, B = ExpressionKey<K>> {
    /// Unique per expansion of the attribute.
    pub(crate) site: &'static str,
    pub(crate) function: &'static str,
    /// The `name` option, when given.
    pub(crate) name: Option<&'static str>,
    pub(crate) build: fn(&Claim) -> Cache<K, V, E>,
    /// The type name of a closure written where the handle is: its instantiation.
    pub(crate) here: fn() -> &'static str,
    pub(crate) mode: LeaderMode,
    pub(crate) key_of: B,
}

/// How a cached function's leader runs its origin (see the leader-mode table in `docs/behaviour.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderMode {
    /// Every argument is owned: the origin outlives its callers ([`Cache::load`]).
    Detached,
    /// An argument borrows: the origin runs in the leading caller, and a waiter takes
    /// over if that caller goes away ([`Cache::load_inline`]).
    Inline,
}

/// What a cache is built as: its name, and why it may serve nothing.
#[doc(hidden)]
pub struct Claim {
    pub(crate) name: Arc<str>,
    /// Set when another cache of the process already has this name.
    pub(crate) taken: Option<Error>,
    /// Build it with caching turned off.
    pub(crate) uncached: bool,
}

impl<K, V, E, B: Copy> Clone for Handle<K, V, E, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V, E, B: Copy> Copy for Handle<K, V, E, B> {}

impl<K, V, E, B> fmt::Debug for Handle<K, V, E, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("function", &self.function)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<K, V, E, B> Handle<K, V, E, B> {
    /// How the function's leader runs its origin, chosen by the attribute from the
    /// signature or its `mode` option.
    pub fn leader_mode(&self) -> LeaderMode {
        self.mode
    }

    /// The key the function builds from these arguments, given as it takes them (a tuple
    /// of its keyed arguments in order, borrowed forms included): `(tenant, id)` with
    /// `tenant: &str` gives `(String, u64)`.
    pub fn key<Args>(&self, args: Args) -> K
    where
        B: KeyOf<Args, Key = K>,
    {
        self.key_of.key_of(args)
    }
}

impl<K, V, E, B> Handle<K, V, E, B>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
{
    /// The cache, created on first use.
    pub fn cache(&self) -> Cache<K, V, E> {
        let path = instance((self.here)());
        let path = format!("{}::{}", parent(path), self.function);
        self.cache_of(path)
    }

    /// The cache of the function body whose closure type name is `here`.
    pub(crate) fn cache_at(&self, here: &'static str) -> Cache<K, V, E> {
        self.cache_of(instance(here).to_owned())
    }

    /// A cache of its own for the body whose closure type name is `here`, caching nothing
    /// (see `Instances::resolve`), outside the registry.
    pub(crate) fn uncached_at(&self, here: &'static str) -> Cache<K, V, E> {
        let name: Arc<str> = self.name.map_or_else(|| instance(here).into(), Into::into);
        (self.build)(&Claim {
            name,
            taken: None,
            uncached: true,
        })
    }

    fn cache_of(&self, path: String) -> Cache<K, V, E> {
        let identity = format!("{}@{path}", self.site);
        let mut registry = registry().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cache) = registry.caches.get(&identity) {
            // The site is one expansion, so its types are this handle's by construction.
            if let Some(cache) = cache.downcast_ref::<Cache<K, V, E>>() {
                return cache.clone();
            }
        }
        let name: Arc<str> = self.name.map_or_else(|| path.as_str().into(), Into::into);
        let taken = match registry.names.get(&name) {
            Some(first) if *first != identity => {
                let first = first.as_str().into();
                let error = Error::DuplicateName {
                    cache: name.clone(),
                    first,
                };
                tracing::warn!(target: "stampede", %error, "two caches share one name");
                Some(error)
            }
            Some(_) => None,
            None => {
                registry.names.insert(name.clone(), identity.clone());
                None
            }
        };
        let cache = (self.build)(&Claim {
            name,
            taken,
            uncached: false,
        });
        registry.caches.insert(identity, Box::new(cache.clone()));
        cache
    }

    /// Drops `key`'s value here and, on a shared backend, in every replica (see
    /// [`Cache::invalidate`]).
    pub async fn invalidate(&self, key: &K) -> Result<(), Error> {
        self.cache().invalidate(key).await
    }

    /// [`Handle::invalidate`] with the function's own keyed arguments, as a tuple in
    /// their order and in the forms the function takes them:
    /// `LOAD_PRODUCT.invalidate_args((tenant, id))` for
    /// `async fn load_product(tenant: &str, id: u64, db: &Db)` with `skip(db)`.
    pub fn invalidate_args<Args>(
        &self,
        args: Args,
    ) -> Pin<Box<dyn Future<Output = Result<(), Error>> + Send + '_>>
    where
        B: KeyOf<Args, Key = K> + Sync,
    {
        // The key is built now, so the future borrows nothing from the arguments; a
        // concrete future type keeps a wrong argument list to one error, at the call.
        let key = self.key(args);
        Box::pin(async move { self.invalidate(&key).await })
    }

    /// Puts `value` in the cache for `key`, here and on a shared backend for every
    /// replica, fencing out loads of `key` that started before it (see [`Cache::insert`]).
    pub async fn insert(&self, key: &K, value: V) -> Result<(), Error> {
        self.cache().insert(key.clone(), value).await
    }

    /// Drops `key`'s value because its source changed at `source_version`, unless that
    /// change is already known here or in the shared store (see [`Cache::invalidate_at`]):
    /// a `u64` or an `i64`.
    pub async fn invalidate_at(
        &self,
        key: &K,
        source_version: impl SourceVersion,
    ) -> Result<(), Error> {
        self.cache().invalidate_at(key, source_version).await
    }

    /// Drops every value of this cache, in every replica on a shared backend (see
    /// [`Cache::invalidate_all`]).
    pub async fn invalidate_all(&self) -> Result<(), Error> {
        self.cache().invalidate_all().await
    }

    /// Drops every value of this cache tagged `tag` (the attribute's `tags = ...`), in
    /// every replica on a shared backend; other caches keep theirs (see
    /// [`Cache::invalidate_tag`], and [`crate::invalidate_tag`] for every cache).
    pub async fn invalidate_tag(&self, tag: impl AsRef<str>) -> Result<(), Error> {
        self.cache().invalidate_tag(tag).await
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.cache().stats()
    }

    /// The keys that cost the origin most (see [`Cache::hot_keys`]).
    pub fn hot_keys(&self) -> Vec<crate::HotKey<K>> {
        self.cache().hot_keys()
    }
}

/// Builds a cached function's key from its keyed arguments, given as a tuple: what a
/// handle's `fn` pointer does for [`Handle::invalidate_args`] and [`Handle::key`].
#[diagnostic::on_unimplemented(
    message = "this handle cannot build its key from `{Args}`",
    label = "not the function's keyed arguments",
    note = "pass the function's keyed arguments as a tuple, in order and in the types it takes them (`(tenant, id)`, `(id,)` for one); a function whose key is an expression (`key = ...` beyond its arguments) has no argument form: use `invalidate(&key)`"
)]
pub trait KeyOf<Args> {
    /// The key built.
    type Key;
    /// The key of these arguments.
    fn key_of(&self, args: Args) -> Self::Key;
}

macro_rules! key_of_arities {
    ($(($($arg:ident),+)),+) => {$(
        impl<F, K, $($arg),+> KeyOf<($($arg,)+)> for F
        where
            F: Fn($($arg),+) -> K,
        {
            type Key = K;

            #[allow(non_snake_case)]
            fn key_of(&self, ($($arg,)+): ($($arg,)+)) -> K {
                self($($arg),+)
            }
        }
    )+};
}

key_of_arities!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F2),
    (A, B, C, D, E, F2, G),
    (A, B, C, D, E, F2, G, H)
);

/// The `B` of a handle whose function's key (a `K`) is an expression: it has no argument
/// form.
pub struct ExpressionKey<K>(std::marker::PhantomData<fn() -> K>);

impl<K> ExpressionKey<K> {
    /// The only value.
    pub const fn new() -> Self {
        ExpressionKey(std::marker::PhantomData)
    }
}

impl<K> Default for ExpressionKey<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> Clone for ExpressionKey<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for ExpressionKey<K> {}

impl<K> fmt::Debug for ExpressionKey<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExpressionKey")
    }
}

impl<K, Args> KeyOf<Args> for ExpressionKey<K>
where
    Args: ArgumentForm,
{
    type Key = K;

    fn key_of(&self, _: Args) -> K {
        unreachable!("no type has an argument form")
    }
}

/// Implemented by no type, and sealed so none can be: what the compiler names when
/// `invalidate_args` is called on the handle of a function whose key is an expression.
#[diagnostic::on_unimplemented(
    message = "this function's key is an expression (`key = ...`), so its handle has no argument form",
    label = "the key is not built from these arguments alone",
    note = "build the key as the `key` expression does and call `invalidate(&key)`"
)]
pub trait ArgumentForm: sealed::Sealed {}

mod sealed {
    /// Unnameable outside this module, so no type outside it implements `ArgumentForm`.
    pub trait Sealed {}
}

#[derive(Default)]
struct Registry {
    /// By identity: site and instantiation.
    caches: HashMap<String, Box<dyn Any + Send + Sync>>,
    /// Each name, with the identity that claimed it first.
    names: HashMap<Arc<str>, String>,
}

/// Where a function and its handle meet: by an identity no two functions share.
fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// The path of the item a closure was written in: `app::Repo<app::A>::get` for
/// `app::Repo<app::A>::get::{{closure}}::{{closure}}`.
pub(crate) fn instance(closure: &str) -> &str {
    let mut path = closure;
    while let Some(outer) = path.strip_suffix("}}") {
        match outer.rfind("::{{") {
            Some(at) => path = &outer[..at],
            None => break,
        }
    }
    path
}

/// `app::Repo<app::A>` for `app::Repo<app::A>::GET`: the path less its last segment,
/// splitting only outside angle brackets.
fn parent(path: &str) -> &str {
    let mut depth = 0usize;
    let mut last = None;
    let bytes = path.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => depth = depth.saturating_sub(1),
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => last = Some(i),
            _ => {}
        }
    }
    last.map_or(path, |at| &path[..at])
}

#[cfg(test)]
mod tests;
