//! Negative caching: errors a policy chooses (a row that is not there) are kept for a short
//! time and served to the callers of their key, so a hot id that is not found costs one
//! origin call per `for`, not one per burst of callers.
//!
//! Kept errors live in this process's memory only, whatever the backend: an error type
//! need not be serializable, and a replica that keeps one for a few seconds answers as
//! the origin just did. They are stored under the same fences as values (an invalidation
//! during the failing load keeps its error out), dropped by `invalidate` on this replica,
//! by a value stored for the key, and by the expiry of `for`, read on the cache's clock.
//! Another replica's invalidation does not reach them, so `for` should stay short.
use crate::any_key::{AnyKey, DynKey};
use crate::clock::Instant;
use std::any::Any;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The predicate, over an error of any type.
type Keep = dyn Fn(&dyn Any) -> bool + Send + Sync;

/// Which errors are kept, and for how long: a policy setting over an error of any type.
#[derive(Clone)]
pub(crate) struct CacheErrors {
    ttl: Duration,
    keep: Arc<Keep>,
    type_name: &'static str,
}

impl CacheErrors {
    pub(crate) fn new<E: 'static>(ttl: Duration, keep: fn(&E) -> bool) -> Self {
        CacheErrors {
            ttl,
            // An error of another type is not the predicate's to keep.
            keep: Arc::new(move |error| error.downcast_ref::<E>().is_some_and(keep)),
            type_name: std::any::type_name::<E>(),
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn keeps<E: 'static>(&self, error: &E) -> bool {
        (self.keep)(error)
    }
}

impl fmt::Debug for CacheErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CacheErrors({:?}, fn(&{}) -> bool)",
            self.ttl, self.type_name
        )
    }
}

/// The errors one cache keeps, each until its `for` ends. Kept by [`AnyKey`], as any
/// type: one table type for every cache (see `any_key`).
pub(crate) struct KnownErrors<K, E> {
    entries: moka::sync::Cache<AnyKey, (Arc<dyn Any + Send + Sync>, Instant)>,
    types: PhantomData<fn(K) -> E>,
}

impl<K, E> KnownErrors<K, E>
where
    K: Hash + Eq + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Bounded like the values (`capacity`); moka's time-to-live only frees memory, the
    /// deadline each entry carries decides whether it is served.
    pub(crate) fn new(capacity: u64, ttl: Duration) -> Self {
        KnownErrors {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build(),
            types: PhantomData,
        }
    }

    /// The error kept for `key`, if its time has not run out.
    pub(crate) fn get(&self, key: &K, now: Instant) -> Option<E> {
        let (error, until) = self.entries.get(key as &dyn DynKey)?;
        (now < until).then(|| error.downcast_ref::<E>().cloned())?
    }

    pub(crate) fn insert(&self, key: K, error: E, until: Instant) {
        self.entries
            .insert(AnyKey::new(key), (Arc::new(error), until));
    }

    pub(crate) fn remove(&self, key: &K) {
        self.entries.invalidate(key as &dyn DynKey);
    }

    pub(crate) fn clear(&self) {
        self.entries.invalidate_all();
    }
}

#[cfg(test)]
mod tests;
