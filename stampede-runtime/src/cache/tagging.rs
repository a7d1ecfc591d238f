//! A cache's part in tags (see `tags.rs`): the versions a loaded entry is stored with, and
//! invalidating a tag of this cache alone.
use super::load::outcome;
use super::{Cache, CacheBuilder, Inner};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::Envelope;
use crate::error::Error;
use crate::policy::Consistency;
use crate::runtime::Runtime;
use crate::shared::tier::Found;
use crate::tags::{self, Began, Refusal, TagBook};
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

/// The tags of a cache's entries, by key and value.
pub(crate) type TagsOf<K, V> = Arc<dyn Fn(&K, &V, &mut dyn FnMut(&str)) + Send + Sync>;

/// A cache's tags: how an entry's are found (none for a cache without tags), the book
/// that versions them, and the scope its own invalidations use.
pub(crate) struct Tagging<K, V> {
    pub(crate) of: Option<TagsOf<K, V>>,
    pub(crate) book: Arc<TagBook>,
    pub(crate) scope: Arc<str>,
    /// Where a tag of this cache alone is moved (none when the runtime would not build).
    pub(crate) runtime: Option<Runtime>,
}

impl<K, V> Tagging<K, V> {
    /// The names an entry of `key` and `value` is checked under: each of its tags, runtime
    /// wide and in this cache's scope. `None` when the tags function panicked: the entry
    /// is not stored (the panic is logged).
    pub(crate) fn names(&self, key: &K, value: &V) -> Option<Vec<Arc<str>>> {
        let of = self.of.as_ref()?;
        let mut names: Vec<Arc<str>> = Vec::new();
        let found = std::panic::catch_unwind(AssertUnwindSafe(|| {
            of(key, value, &mut |tag| {
                names.push(tag.into());
                names.push(tags::scoped(&self.scope, tag));
            })
        }));
        if found.is_err() {
            tracing::error!(target: "stampede", cache = %self.scope, "the tags function panicked: the value is answered but not stored");
            return None;
        }
        names.sort_unstable();
        names.dedup();
        Some(names)
    }
}

/// Where a value being written came from, against the shared store's read before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueFrom {
    /// A load's origin call, made after the store was read.
    Origin,
    /// An insert's caller, before the insert began (and read the store).
    Caller,
}

/// What step 6 came to (see [`Inner::publish`]).
pub(super) enum Written<V> {
    /// What memory may keep, if anything.
    Kept(Option<Envelope<V>>),
    /// A tag of the value moved while the load ran: nothing is stored, and callers who
    /// joined the load are sent to load again (one may have joined after the move).
    TagMoved,
}

impl<K, V, E> CacheBuilder<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Tags each stored entry by its key and value, so one
    /// [`Runtime::invalidate_tag`] (every cache of the runtime) or
    /// [`Cache::invalidate_tag`] (this cache) retires every entry carrying the tag, on
    /// every replica, without a scan. An entry with no tags is never retired by one.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("profiles").fresh(Duration::from_secs(60)).build().unwrap();
    /// // Keyed by (tenant, user).
    /// let profiles: Cache<(u64, u64), String> = Cache::builder(policy)
    ///     .tags(|&(tenant, _): &(u64, u64), _profile: &String| [format!("tenant:{tenant}")])
    ///     .build();
    /// profiles.load((7, 1), || async { Ok("ada".to_owned()) }).await.unwrap();
    /// profiles.load((8, 1), || async { Ok("bob".to_owned()) }).await.unwrap();
    /// profiles.invalidate_tag("tenant:7").await.unwrap();
    /// assert_eq!(profiles.peek(&(7, 1)), None);
    /// assert_eq!(profiles.peek(&(8, 1)), Some("bob".to_owned()));
    /// # }
    /// ```
    pub fn tags<F, I>(mut self, tags: F) -> Self
    where
        F: Fn(&K, &V) -> I + Send + Sync + 'static,
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.tags = Some(Arc::new(
            move |key: &K, value: &V, each: &mut dyn FnMut(&str)| {
                for tag in tags(key, value) {
                    each(tag.as_ref());
                }
            },
        ));
        self
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Retires every entry of this cache tagged `tag` (see [`CacheBuilder::tags`]), here
    /// and on every replica, as [`Runtime::invalidate_tag`](crate::Runtime::invalidate_tag)
    /// does for every cache of a runtime. Sent even by a cache built without tags, so a
    /// process that only writes can invalidate what others cached.
    ///
    /// [`CacheBuilder::tags`]: crate::CacheBuilder::tags
    pub async fn invalidate_tag(&self, tag: impl AsRef<str>) -> Result<(), Error> {
        let tagging = &self.inner.tags;
        let name = tags::scoped(&tagging.scope, tag.as_ref());
        match &tagging.runtime {
            Some(runtime) => {
                let acknowledged = self.inner.policy.consistency() == Consistency::Acknowledged;
                runtime
                    .move_tag(&name, self.inner.policy.name().clone(), acknowledged)
                    .await
            }
            None => {
                tagging.book.invalidate_here(&name);
                Ok(())
            }
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// The book's count of moves as a load begins (0 for a cache without tags).
    pub(super) fn tags_began(&self) -> u64 {
        match self.tags.of {
            Some(_) => self.tags.book.moves(),
            None => 0,
        }
    }

    /// Whether a tag moved since the count `began` (a cache with tags only): an error its
    /// load ran into is then not kept (negative caching), as a value would not be stored.
    pub(super) fn tags_moved_since(&self, began: u64) -> bool {
        self.tags.of.is_some() && self.tags.book.moves() > began
    }

    /// When a load's value began, for its tags' check (`began`: the book's count when the
    /// load began, and when it asked; `from`: where the value came from, which says what a
    /// tag's move must come after to leave it current): the store's clock at the read
    /// when there was one, else the wall clock, with the margin each warrants.
    pub(super) fn began(
        &self,
        found: Option<&Found<K, V>>,
        (began, asked): (u64, Instant),
        from: ValueFrom,
    ) -> Began {
        let ago = self.clock.precise().saturating_duration_since(asked);
        let read_at = found.and_then(|found| found.read.as_ref());
        let (micros, margin) = match read_at {
            // The store's clock at the read, which came before the origin call: on one
            // server, the same clock as the tags' versions.
            Some(read) => {
                let one_clock = self.tier().is_some_and(|t| t.replica.store().one_server());
                let margin = if one_clock {
                    Duration::ZERO
                } else {
                    tags::UNKNOWN_MARGIN
                };
                let at_read = read.clock.read_ms().saturating_mul(1000);
                // A write-through's value is its caller's, from before the insert
                // began, and its read came after: a tag moved between the two would
                // pass for older than the value (seed 10015151). The store's clock
                // when it began is at most the read's less the time since.
                let micros = match from {
                    ValueFrom::Origin => at_read,
                    ValueFrom::Caller => {
                        let ago = u64::try_from(ago.as_micros()).unwrap_or(u64::MAX);
                        at_read.saturating_sub(ago)
                    }
                };
                (micros, margin)
            }
            None => (tags::wall_micros_ago(ago), tags::UNKNOWN_MARGIN),
        };
        Began {
            count: began,
            micros,
            margin,
        }
    }

    /// Step 6 for a cache with tags: `envelope` with the versions of its tags, or `None`
    /// when one of them moved since the load began (or that cannot be told). Then its
    /// callers still get the value and nothing stores it, as after an invalidation. A
    /// re-armed fallback keeps the versions of the value it re-arms.
    pub(super) async fn stamp(
        &self,
        key: &K,
        mut envelope: Envelope<V>,
        began: Began,
        degraded: bool,
    ) -> Option<Envelope<V>> {
        let tagging = &self.tags;
        if envelope.rearmed() {
            return Some(envelope);
        }
        let Some(names) = tagging.names(key, &envelope.value) else {
            return self.tag_fenced();
        };
        if names.is_empty() {
            return Some(envelope);
        }
        for _ in 0..2 {
            match tagging.book.stamp(&names, began) {
                Ok(stamp) => {
                    envelope.tag(stamp);
                    return Some(envelope);
                }
                Err(Refusal::Moved) => break,
                Err(Refusal::Unknown(unknown)) => {
                    // Read from the store (the book then knows when they moved, see
                    // `TagBook::stamp`); without one to ask now (outside Tokio), or when
                    // it does not answer, the value is not stored: a version assumed
                    // could let a retired value pass for current.
                    let replica = tagging
                        .runtime
                        .as_ref()
                        .and_then(|runtime| runtime.replica());
                    let read = match replica {
                        Some(replica) => replica.tag_versions(&unknown).await.is_ok(),
                        None => false,
                    };
                    if read {
                        continue;
                    }
                    // Loaded while the store was unreachable, and kept only for the
                    // degraded bound: stored unverified, as untagged values are then.
                    if degraded && let Ok(stamp) = tagging.book.stamp_unverified(&names, began) {
                        envelope.tag(stamp);
                        return Some(envelope);
                    }
                    break;
                }
            }
        }
        self.tag_fenced()
    }

    fn tag_fenced(&self) -> Option<Envelope<V>> {
        self.counters.tag_fenced.bump();
        outcome("fenced by a tag");
        None
    }
}
