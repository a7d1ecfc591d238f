//! The handle `#[cached]` emits beside each function (`LOAD_PROFILE` for `load_profile`):
//! invalidation and stats for a cache whose calls go through the function itself.
//!
//! A cache's identity is its site (one per expansion of the attribute, so two functions
//! that one `macro_rules!` writes are two sites) plus the instantiation it runs in (so
//! `Repo::<A>::get` and `Repo::<B>::get` are two caches). The function keeps its cache in
//! a static of its own, so a call costs one load and one pointer compare; the handle, a
//! constant that cannot name that static, finds the same cache by the same identity.
use crate::bounds::{CacheKey, LocalValue, SharedError};
use crate::error::Error;
use crate::loader::Cache;
use crate::stats::Stats;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// One cached function's cache, reachable without calling the function.
///
/// The cache it names is created once per process and instantiation, by whichever comes
/// first: the function's first call or the handle's first use. In a generic `impl`, each
/// instantiation's handle (`Repo::<A>::GET`) reaches that instantiation's cache.
pub struct Handle<K, V, E = Error> {
    /// Unique per expansion of the attribute.
    pub(crate) site: &'static str,
    pub(crate) function: &'static str,
    /// The `name` option, when given.
    pub(crate) name: Option<&'static str>,
    pub(crate) build: fn(&Claim) -> Cache<K, V, E>,
    /// The type name of a closure written where the handle is: its instantiation.
    pub(crate) here: fn() -> &'static str,
    pub(crate) mode: LeaderMode,
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

/// What a cache is built as: its name, and why it may serve nothing.
#[doc(hidden)]
pub struct Claim {
    pub(crate) name: Arc<str>,
    /// Set when another cache of the process already has this name.
    pub(crate) taken: Option<Error>,
    /// Build it with caching turned off.
    pub(crate) uncached: bool,
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
            .field("function", &self.function)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<K, V, E> Handle<K, V, E> {
    /// How the function's leader runs its origin, chosen by the attribute from the
    /// signature or its `mode` option.
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
        let path = instance((self.here)());
        let path = format!("{}::{}", parent(path), self.function);
        self.cache_of(path)
    }

    /// The cache of the function body whose closure type name is `here`.
    pub(crate) fn cache_at(&self, here: &'static str) -> Cache<K, V, E> {
        self.cache_of(instance(here).to_owned())
    }

    /// A cache of its own for the body whose closure type name is `here`, caching nothing
    /// (see `Instances::other`), outside the registry.
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

    /// Puts `value` in the cache for `key`, here and on a shared backend for every
    /// replica, fencing out loads of `key` that started before it (see [`Cache::insert`]).
    pub async fn insert(&self, key: &K, value: V) -> Result<(), Error> {
        self.cache().insert(key.clone(), value).await
    }

    /// Drops every value of this replica (see [`Cache::invalidate_all`]).
    pub async fn invalidate_all(&self) -> Result<(), Error> {
        self.cache().invalidate_all().await
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.cache().stats()
    }
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
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_the_item_a_closure_was_written_in() {
        assert_eq!(
            instance("app::Repo<app::A>::get::{{closure}}::{{closure}}"),
            "app::Repo<app::A>::get"
        );
        assert_eq!(instance("app::free<u8>::{{closure}}"), "app::free<u8>");
        assert_eq!(parent("app::Repo<app::m::A>::GET"), "app::Repo<app::m::A>");
        assert_eq!(parent("app::m::GET"), "app::m");
    }
}
