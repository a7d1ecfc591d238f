//! Notices from other replicas, applied to this cache: a value published elsewhere
//! demotes this replica's copy to stale (or drops it), an invalidation drops it, and
//! either detaches a running load the notice outdates. A lost subscription drops every
//! copy of what the store holds, since notices sent meanwhile were missed.
use super::Inner;
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::envelope::Envelope;
use crate::shared::store::{NoticeKind, StoreEvent};
use crate::shared::tier::Tier;
use std::hash::Hash;
use std::sync::Weak;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// Another replica published a newer value of `key` (a refresh): this replica's copy
    /// is served as stale from now, if its stale window allows, so the next call reads the
    /// newer value in the background instead of every caller waiting for the read. `false`
    /// when it cannot be: the copy is dropped instead. `since` and `fence`: the
    /// subscription epoch the copy's load began under and the fence it was read or
    /// written under, which the demoted copy keeps.
    fn demote(&self, tier: &Tier<K, V>, key: &K, since: u64, fence: u64) -> bool {
        let now = self.clock.now();
        let Some(held) = self.memory.get_arc(key) else {
            return false;
        };
        if held.stale_until <= now {
            return false;
        }
        let demoted = self
            .memory
            .replace_if(key, held.generation, |held| Envelope {
                fresh_until: now,
                ..held.clone()
            });
        if demoted {
            // Still under its own fence, not the publish's: it holds an older value than
            // the store, and an invalidation's notice above its own fence drops it. A copy
            // this replica no longer hears of is dropped instead.
            return (tier.address(key))
                .is_some_and(|entry| tier.copied(&entry, key, fence, held.generation, since));
        }
        demoted
    }
}

/// Keeps a cache's memory copies and running loads in line with the shared store: a
/// notice from another replica drops the copy it names (or, for a refresh, serves it as
/// stale until the newer value is read) and detaches a load it outdates; a
/// lost (or lagging) subscription drops every copy of what the store holds, and so does
/// subscribing again, which also detaches every running load, since notices sent in
/// between were missed.
///
/// Longer than a screen: one `match` over the kinds of store event, each a few lines;
/// together they are what a notice does to memory and to running loads.
pub(super) async fn follow<K, V, E>(
    inner: Weak<Inner<K, V, E>>,
    mut events: broadcast::Receiver<StoreEvent>,
) where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    loop {
        let event = events.recv().await;
        // Taken first, even by a listener whose cache is gone: everything before it was
        // handled, and a hearing renewal or another replica's answer waits for every
        // listener that was there when it was sent.
        if let Ok(StoreEvent::Passage(passage)) = &event {
            passage.taken();
            continue;
        }
        let lost = matches!(event, Ok(StoreEvent::SubscriptionLost));
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(tier) = inner.tier() else {
            return;
        };
        match event {
            Ok(StoreEvent::Notice(notice)) => {
                // A tag's notice names no entry: the runtime's tag book hears it.
                if notice.own || notice.kind == NoticeKind::Tag {
                    continue;
                }
                // Fence first, as a local invalidation does: a load that read before this
                // write no longer stores, so the copy dropped next cannot come back.
                if let Some(key) = tier.outdated_by(&notice) {
                    inner.flights.invalidate(&key);
                }
                if let Some((key, since, fence)) = tier.noticed(&notice)
                    && !(notice.kind == NoticeKind::Published
                        && inner.demote(tier, &key, since, fence))
                {
                    inner.memory.invalidate(&key);
                    inner.forget_error(&key);
                }
            }
            Ok(StoreEvent::SubscriptionLost | StoreEvent::Subscribed(_))
            | Err(RecvError::Lagged(_)) => {
                // Back (or lagging): notices were missed meanwhile, so loads running now
                // may have read before one. Fence first: none of them stores after the
                // copies are gone. While the subscription is down, a load keeps no copy
                // of what the store holds anyway, and one made without the store (Redis
                // unreachable) is what degraded mode runs on: it stays. Back under a new
                // epoch, what began under it heard every notice: this listener may hear
                // of the epoch after such a copy was made, and keeps it.
                let before = match event {
                    Ok(StoreEvent::Subscribed(epoch)) => epoch,
                    _ => u64::MAX,
                };
                if !lost {
                    if before == u64::MAX {
                        inner.flights.invalidate_all();
                    } else {
                        for key in tier.loads_begun_before(before) {
                            inner.flights.invalidate(&key);
                        }
                    }
                }
                for key in tier.forget_heard_copies(before) {
                    inner.memory.invalidate(&key);
                }
                if let Some(known) = &inner.known_errors {
                    known.clear();
                }
            }
            // Taken above.
            Ok(StoreEvent::Passage(_)) => {}
            Err(RecvError::Closed) => return,
        }
    }
}
