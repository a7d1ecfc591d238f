//! The calls generated code makes once the attribute has asserted its key, value and error
//! bounds under the user's tokens, so an unfit type is reported there once, not again by
//! every call that needs the same bound. Not a public API: the facade re-exports it as
//! `stampede::__private`.
//!
//! Generated code calls each method on `&&Asserted<K, V, E>`. When the types fit, the
//! compiler picks the real call (the traits implemented for `&Asserted`); when one does
//! not, the assertion has failed the build already, and the compiler picks the stand-in
//! implemented for `Asserted` itself, which has no bounds to report again and is never
//! run. Every bound on an origin (`Send`, `'static`, its output) stays on the methods of
//! both, so a body that is not `Send` is still reported, here as everywhere.
use crate::bounds::{CacheError, CacheKey, CacheValue, LocalValue};
use crate::cache::{boxed, Cache, Detached, Inline, Lookup, Unanswered, VersionOf};
use crate::error::Error;
use crate::handle::Claim;
use crate::handle::Handle;
use crate::macro_support::build;
use crate::per_call::CallMode;
use crate::policy::PolicyBuilder;
use serde::Serialize;
use std::future::Future;
use std::marker::PhantomData;

/// The types of one cached function (key, value, error), as a type with no bounds.
type Types<K, V, E> = PhantomData<fn() -> (K, V, E)>;

/// The types of one cached function, whose bounds the attribute asserted.
pub struct Asserted<K, V, E>(Types<K, V, E>);

impl<K, V, E> Asserted<K, V, E> {
    /// The function's types.
    pub const fn new() -> Self {
        Asserted(PhantomData)
    }
}

impl<K, V, E> Default for Asserted<K, V, E> {
    fn default() -> Self {
        Self::new()
    }
}

const NEVER: &str = "picked only when an assertion has already failed the build";

/// Finding and building caches (memory-only bounds).
pub trait Caches<K, V, E> {
    /// The cache of the function body whose closure type name is `here`.
    fn cache_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E>;
    /// The cache of the function body whose closure type name is `here`, with caching turned
    /// off: for an instantiation whose type name another instantiation already printed (see
    /// [`Instances::resolve`](build::Instances::resolve)).
    fn uncached_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E>;
    /// See `build_claimed_cache` (`build.rs`).
    fn build_claimed(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Caches<K, V, E> for &Asserted<K, V, E> {
    fn cache_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E> {
        handle.cache_at(here)
    }

    fn uncached_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E> {
        handle.uncached_at(here)
    }

    fn build_claimed(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        build::build_claimed_cache(
            policy,
            map_error,
            claim,
            source_version,
            tags,
            admission_group,
        )
    }
}

/// Building caches a shared store could hold (serde bounds too).
pub trait SharedCaches<K, V, E> {
    /// See `build_shared_cache` (`build.rs`).
    fn build_shared(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
}

impl<K, V, E> SharedCaches<K, V, E> for &Asserted<K, V, E>
where
    K: CacheKey + Serialize,
    V: CacheValue,
    E: CacheError,
{
    fn build_shared(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        build::build_shared_cache(
            policy,
            map_error,
            claim,
            source_version,
            tags,
            admission_group,
        )
    }
}

/// Caches of functions that return a plain value.
pub trait PlainCaches<K, V> {
    /// See `build_plain_cache` (`build.rs`).
    fn build_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, Error>;
}

impl<K: CacheKey, V: LocalValue> PlainCaches<K, V> for &Asserted<K, V, Error> {
    fn build_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, Error> {
        build::build_plain_cache(policy, claim, source_version, tags, admission_group)
    }
}

/// Caches of functions that return a plain value a shared store could hold.
pub trait SharedPlainCaches<K, V> {
    /// See `build_shared_plain_cache` (`build.rs`).
    fn build_shared_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, Error>;
}

impl<K: CacheKey + Serialize, V: CacheValue> SharedPlainCaches<K, V> for &Asserted<K, V, Error> {
    fn build_shared_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, Error> {
        build::build_shared_plain_cache(policy, claim, source_version, tags, admission_group)
    }
}

/// One call of a cached function: a lookup that answers a fresh hit at once, then a load,
/// or a forced refresh (`stampede::refresh`).
pub trait Calls<K, V, E> {
    /// The hit path: a fresh hit, or what the load goes on from.
    fn lookup(&self, cache: &Cache<K, V, E>, key: &K) -> Lookup<V>;

    /// Detached mode: the load after the lookup, as [`Cache::load`] makes it.
    fn call_detached<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static;

    /// Inline mode: the load after the lookup, as [`Cache::load_inline`] makes it.
    fn call_inline<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a;

    /// `stampede::refresh`, in either async mode: [`Cache::refresh_keyed`].
    fn call_refresh<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a;

    /// A plain `fn`: [`Cache::load_blocking`], or [`Cache::refresh_blocking`] under
    /// `stampede::refresh_blocking`.
    fn call_blocking<F>(
        &self,
        cache: &Cache<K, V, E>,
        mode: CallMode,
        key: K,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>;
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Calls<K, V, E> for &Asserted<K, V, E> {
    #[inline(always)]
    fn lookup(&self, cache: &Cache<K, V, E>, key: &K) -> Lookup<V> {
        cache.lookup(key)
    }

    #[inline]
    fn call_detached<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        cache.load_found::<Detached, _, _>(key, found, boxed(origin))
    }

    #[inline]
    fn call_inline<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a,
    {
        cache.load_found::<Inline, _, _>(key, found, origin)
    }

    fn call_refresh<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a,
    {
        cache.refresh_keyed(key, origin)
    }

    fn call_blocking<F>(
        &self,
        cache: &Cache<K, V, E>,
        mode: CallMode,
        key: K,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>,
    {
        match mode {
            CallMode::Refresh => cache.refresh_blocking(key, origin),
            _ => cache.load_blocking(key, origin),
        }
    }
}

/// The stand-ins, picked only when an assertion failed: no bounds, never run.
pub trait Unfit<K, V, E> {
    /// Never run.
    fn cache_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E>;
    /// Never run.
    fn uncached_at(&self, handle: &Handle<K, V, E>, here: &'static str) -> Cache<K, V, E>;
    /// Never run.
    fn build_claimed(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
    /// Never run.
    fn build_shared(
        &self,
        policy: PolicyBuilder,
        map_error: fn(Error) -> E,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
    /// Never run.
    fn build_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
    /// Never run.
    fn build_shared_plain(
        &self,
        policy: PolicyBuilder,
        claim: &Claim,
        source_version: Option<VersionOf<V>>,
        tags: Option<fn(&K, &V) -> Vec<String>>,
        admission_group: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E>;
    /// Never run.
    fn lookup(&self, cache: &Cache<K, V, E>, key: &K) -> Lookup<V>;
    /// Never run.
    fn call_detached<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static;
    /// Never run.
    fn call_inline<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a;
    /// Never run.
    fn call_refresh<'a, F, Fut>(
        &self,
        cache: &'a Cache<K, V, E>,
        key: K,
        origin: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a;
    /// Never run.
    fn call_blocking<F>(
        &self,
        cache: &Cache<K, V, E>,
        mode: CallMode,
        key: K,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>;
}

impl<K, V, E> Unfit<K, V, E> for Asserted<K, V, E> {
    fn cache_at(&self, _: &Handle<K, V, E>, _: &'static str) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn uncached_at(&self, _: &Handle<K, V, E>, _: &'static str) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn build_claimed(
        &self,
        _: PolicyBuilder,
        _: fn(Error) -> E,
        _: &Claim,
        _: Option<VersionOf<V>>,
        _: Option<fn(&K, &V) -> Vec<String>>,
        _: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn build_shared(
        &self,
        _: PolicyBuilder,
        _: fn(Error) -> E,
        _: &Claim,
        _: Option<VersionOf<V>>,
        _: Option<fn(&K, &V) -> Vec<String>>,
        _: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn build_plain(
        &self,
        _: PolicyBuilder,
        _: &Claim,
        _: Option<VersionOf<V>>,
        _: Option<fn(&K, &V) -> Vec<String>>,
        _: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn build_shared_plain(
        &self,
        _: PolicyBuilder,
        _: &Claim,
        _: Option<VersionOf<V>>,
        _: Option<fn(&K, &V) -> Vec<String>>,
        _: Option<fn(&K) -> u64>,
    ) -> Cache<K, V, E> {
        unreachable!("{NEVER}")
    }
    fn lookup(&self, _: &Cache<K, V, E>, _: &K) -> Lookup<V> {
        unreachable!("{NEVER}")
    }
    #[allow(clippy::manual_async_fn)]
    fn call_detached<'a, F, Fut>(
        &self,
        _: &'a Cache<K, V, E>,
        _: K,
        _: Unanswered<V>,
        _: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        async { unreachable!("{NEVER}") }
    }
    #[allow(clippy::manual_async_fn)]
    fn call_inline<'a, F, Fut>(
        &self,
        _: &'a Cache<K, V, E>,
        _: K,
        _: Unanswered<V>,
        _: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a,
    {
        async { unreachable!("{NEVER}") }
    }
    #[allow(clippy::manual_async_fn)]
    fn call_refresh<'a, F, Fut>(
        &self,
        _: &'a Cache<K, V, E>,
        _: K,
        _: F,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        F: FnOnce(&K) -> Fut + 'a,
        Fut: Future<Output = Result<V, E>> + 'a,
    {
        async { unreachable!("{NEVER}") }
    }
    fn call_blocking<F>(&self, _: &Cache<K, V, E>, _: CallMode, _: K, _: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>,
    {
        unreachable!("{NEVER}")
    }
}
