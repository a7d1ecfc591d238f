//! A cache's part in tags (see `tags.rs`): the versions a loaded entry is stored with, and
//! invalidating a tag of this cache alone.
use super::load::outcome;
use super::{Cache, Inner};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::Envelope;
use crate::error::Error;
use crate::remote::tier::Found;
use crate::runtime::Runtime;
use crate::tags::{self, Began, Refusal, TagBook};
use std::sync::Arc;
use std::time::Duration;

/// The tags of a cache's entries, by key and value.
pub(crate) type TagsOf<K, V> = Arc<dyn Fn(&K, &V, &mut dyn FnMut(&str)) + Send + Sync>;

/// A cache's tags: how an entry's are found, the book that versions them, and the scope
/// its own invalidations use.
pub(crate) struct Tagging<K, V> {
    pub(crate) of: TagsOf<K, V>,
    pub(crate) book: Arc<TagBook>,
    pub(crate) scope: Arc<str>,
    /// Where a tag of this cache alone is moved (none when the runtime would not build).
    pub(crate) runtime: Option<Runtime>,
}

impl<K, V> Tagging<K, V> {
    /// The names an entry of `key` and `value` is checked under: each of its tags, runtime
    /// wide and in this cache's scope.
    pub(crate) fn names(&self, key: &K, value: &V) -> Vec<Arc<str>> {
        let mut names: Vec<Arc<str>> = Vec::new();
        (self.of)(key, value, &mut |tag| {
            names.push(tag.into());
            names.push(tags::scoped(&self.scope, tag));
        });
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Retires every entry of this cache tagged `tag` (see [`CacheBuilder::tags`]), here
    /// and on every replica, as [`Runtime::invalidate_tag`](crate::Runtime::invalidate_tag)
    /// does for every cache of a runtime. A cache without tags has nothing to retire.
    ///
    /// [`CacheBuilder::tags`]: crate::CacheBuilder::tags
    pub async fn invalidate_tag(&self, tag: &str) -> Result<(), Error> {
        let Some(tagging) = &self.inner.tags else {
            return Ok(());
        };
        let name = tags::scoped(&tagging.scope, tag);
        match &tagging.runtime {
            Some(runtime) => {
                runtime
                    .move_tag(&name, self.inner.policy.name().clone())
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
        self.tags.as_ref().map_or(0, |tagging| tagging.book.moves())
    }

    /// Step 6's writes before memory, one future (boxed by the load, which would otherwise
    /// carry both): the versions of the entry's tags (`began`: the book's count when the
    /// load began, and when), then the shared store under its fence. What memory may keep.
    pub(super) async fn write(
        &self,
        key: &K,
        found: Option<&mut Found<K, V>>,
        envelope: Envelope<V>,
        now: Instant,
        (began, asked): (u64, Instant),
    ) -> Option<Envelope<V>> {
        let envelope = if self.tags.is_some() {
            let ago = self.clock.precise().saturating_duration_since(asked);
            self.stamp(key, envelope, began, ago).await?
        } else {
            envelope
        };
        if self.remote.is_none() {
            return Some(envelope);
        }
        self.write_remote(key, found, envelope, now).await
    }

    /// Step 6 for a cache with tags: `envelope` with the versions of its tags, or `None`
    /// when one of them moved since the load began (`began`: the book's count then;
    /// `ago`: how long ago it began). Then its callers still get the value and nothing
    /// stores it, as after an invalidation. A re-armed fallback keeps the versions of the
    /// value it re-arms.
    pub(super) async fn stamp(
        &self,
        key: &K,
        mut envelope: Envelope<V>,
        began: u64,
        ago: Duration,
    ) -> Option<Envelope<V>> {
        let Some(tagging) = &self.tags else {
            return Some(envelope);
        };
        if envelope.rearmed {
            return Some(envelope);
        }
        let names = tagging.names(key, &envelope.value);
        if names.is_empty() {
            return Some(envelope);
        }
        let began = Began {
            count: began,
            wall_micros: tags::wall_micros_ago(ago),
        };
        for _ in 0..2 {
            match tagging.book.stamp(&names, began) {
                Ok(stamp) => {
                    envelope.tags = Some(stamp);
                    return Some(envelope);
                }
                Err(Refusal::Moved) => break,
                Err(Refusal::Unknown(unknown)) => {
                    let remote = tagging
                        .runtime
                        .as_ref()
                        .and_then(|runtime| runtime.remote());
                    let Some(remote) = remote else {
                        // No shared store to ask: nothing but this process moves the tag.
                        for tag in &unknown {
                            tagging.book.learn(tag, 0, false, false);
                        }
                        continue;
                    };
                    // The book knows them now, and when they moved (see `TagBook::stamp`).
                    if remote.tag_versions(&unknown).await.is_err() {
                        break;
                    }
                }
            }
        }
        self.counters.tag_fenced.bump();
        outcome("fenced by a tag");
        None
    }
}
