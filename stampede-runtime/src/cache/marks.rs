//! Source versions: how a cache reads them from its values and, in memory, the rule that a
//! value read at an older version than one memory holds, or than one invalidated since
//! (the marks), is not stored.
use super::Inner;
use crate::any_key::{AnyKey, DynKey};
use crate::bounds::{CacheError, CacheKey, LocalValue, SourceVersion};
use crate::envelope::Envelope;
use std::sync::Arc;
use std::time::Duration;

/// A source version as the shared store orders it: `Err` holds a negative one, which it
/// cannot.
type Ordered = Result<u64, i64>;

/// Reads the source version a value was read at, as the shared store orders versions.
pub struct VersionOf<V>(Arc<dyn Fn(&V) -> Ordered + Send + Sync>);

impl<V> VersionOf<V> {
    /// The versions `version` reads.
    pub(crate) fn new<N: SourceVersion>(version: impl Fn(&V) -> N + Send + Sync + 'static) -> Self {
        Self::ordered(move |value| version(value).ordered())
    }

    /// Versions already as the store orders them.
    pub(crate) fn ordered(
        version: impl Fn(&V) -> Result<u64, i64> + Send + Sync + 'static,
    ) -> Self {
        VersionOf(Arc::new(version))
    }
}

impl<V> Clone for VersionOf<V> {
    fn clone(&self) -> Self {
        VersionOf(self.0.clone())
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// The source version `value` was read at, when the cache reads them. A negative one
    /// cannot be ordered against the store's, so the value goes without one (as in a cache
    /// that reads none), and the operator hears which cache made it.
    pub(super) fn version_of(&self, value: &V) -> Option<u64> {
        match (self.source_version.as_ref()?.0)(value) {
            Ok(version) => Some(version),
            Err(negative) => {
                tracing::warn!(
                    target: "stampede",
                    cache = %self.policy.name(),
                    version = negative,
                    "a negative source version cannot be ordered: the value is stored without one"
                );
                None
            }
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// Whether memory holds a value of `key` read at a newer source version than
    /// `envelope`'s: two loads that crossed, the older one finishing last.
    pub(super) fn older_than_held(&self, key: &K, envelope: &Envelope<V>) -> bool {
        let Some(version) = envelope.source_version else {
            return false;
        };
        (self.memory.get_arc(key))
            .and_then(|held| held.source_version)
            .is_some_and(|held| held > version)
    }

    /// Raises `key`'s mark to `version`; `true` when the invalidation is news: not below
    /// the mark before it (a retry at the mark applies again, as in the shared store) and
    /// above the version of the value held.
    pub(super) fn raise_mark(&self, key: &K, version: u64) -> bool {
        let held = self.memory.get(key).and_then(|held| held.source_version);
        let marks = self.marks.get_or_init(|| {
            // Bounded like the values: a mark outlives a value of its key, not the cache.
            moka::sync::Cache::builder()
                .max_capacity(self.policy.capacity())
                .time_to_live(MARK_KEEP)
                .build()
        });
        let mut above = true;
        marks
            .entry(AnyKey::new(key.clone()))
            .and_upsert_with(|mark| match mark {
                Some(mark) if *mark.value() > version => {
                    above = false;
                    mark.into_value()
                }
                _ => version,
            });
        above && held.is_none_or(|held| held < version)
    }

    /// Whether `envelope` was read at a source version below `key`'s mark: older than a
    /// change already invalidated, so memory must not keep it.
    pub(super) fn below_mark(&self, key: &K, envelope: &Envelope<V>) -> bool {
        let (Some(version), Some(marks)) = (envelope.source_version, self.marks.get()) else {
            return false;
        };
        marks
            .get(key as &dyn DynKey)
            .is_some_and(|mark| mark > version)
    }
}

/// How long a key's source-version mark outlives its last invalidation: the longest an
/// invalidation or a lagging load may be delayed and still be recognized as late (the
/// shared store keeps its marks as long).
const MARK_KEEP: Duration = Duration::from_secs(24 * 3600);
