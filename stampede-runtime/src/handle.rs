//! The handle `#[cached]` emits beside each function (`LOAD_PROFILE` for `load_profile`):
//! invalidation and stats for a cache whose calls go through the function itself.
use crate::bounds::{CacheKey, LocalValue, SharedError};
use crate::loader::Cache;
use crate::stats::Stats;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

/// One cached function's cache, reachable without calling the function.
///
/// The handle is a constant (an id and a builder); the cache it names is created once per
/// process, by whichever comes first: the function's first call or the handle's first use.
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{Cache, Handle, LeaderMode, Policy};
///
/// fn build() -> Cache<u64, String> {
///     Cache::new(Policy::builder("names").fresh(Duration::from_secs(60)).build().unwrap())
/// }
/// const NAMES: Handle<u64, String> = Handle::new("doc::names", build, LeaderMode::Detached);
/// NAMES.invalidate(&7);
/// assert_eq!(NAMES.stats().origin_calls, 0);
/// ```
pub struct Handle<K, V, E = crate::Error> {
    id: &'static str,
    build: fn() -> Cache<K, V, E>,
    mode: LeaderMode,
}

/// How a cached function's leader runs its origin (see the README's leader-mode table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderMode {
    /// Every argument is owned: the origin runs as its own task ([`Cache::load`]).
    Detached,
    /// An argument borrows: the origin runs in the leading caller, and a waiter takes
    /// over if that caller goes away ([`Cache::load_inline`]).
    Inline,
}

impl<K, V, E> Clone for Handle<K, V, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V, E> Copy for Handle<K, V, E> {}

impl<K, V, E> fmt::Debug for Handle<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Every handle's cache, by id: the function and its handle meet here.
fn registry() -> &'static Mutex<HashMap<&'static str, Box<dyn Any + Send + Sync>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<&'static str, Box<dyn Any + Send + Sync>>>> =
        OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl<K, V, E> Handle<K, V, E> {
    /// A handle for the cache `build` makes; `id` must be unique in the process (the
    /// attribute uses the function's module path, name and source position).
    pub const fn new(id: &'static str, build: fn() -> Cache<K, V, E>, mode: LeaderMode) -> Self {
        Handle { id, build, mode }
    }

    /// How the function's leader runs its origin, chosen by the attribute from the
    /// signature.
    pub fn leader_mode(&self) -> LeaderMode {
        self.mode
    }
}

impl<K, V, E> Handle<K, V, E>
where
    K: CacheKey,
    V: LocalValue,
    E: SharedError,
{
    /// The cache, created on first use.
    pub fn cache(&self) -> Cache<K, V, E> {
        let mut caches = registry().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cache) = caches
            .get(self.id)
            .and_then(|c| c.downcast_ref::<Cache<K, V, E>>())
        {
            return cache.clone();
        }
        let cache = (self.build)();
        caches.insert(self.id, Box::new(cache.clone()));
        cache
    }

    /// Drops `key`'s value (see [`Cache::invalidate`]).
    pub fn invalidate(&self, key: &K) {
        self.cache().invalidate(key);
    }

    /// Drops every value.
    pub fn invalidate_all(&self) {
        self.cache().invalidate_all();
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.cache().stats()
    }
}
