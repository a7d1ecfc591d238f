//! A load's registration with its tier, from before its first read to its end: what a
//! notice from another replica is checked against (does it outdate a running load?),
//! and what keeps the key's notice bucket subscribed meanwhile.
use super::Tier;
use crate::shared::keys::EntryKey;
use crate::shared::store::{Listening, Notice, NoticeKind};
use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard, PoisonError};

/// The running loads of one key, and the highest fence any of their reads returned.
pub(super) struct Loads<K> {
    key: K,
    fence: u64,
    count: usize,
    /// The earliest subscription epoch any of them began under (0: one began deaf).
    since: u64,
}

/// One load's registration (see [`Tier::loading`]); dropped when the load ends.
pub(crate) struct Loading<K, V> {
    tier: Arc<Tier<K, V>>,
    value_key: String,
    /// The subscription epoch its key was heard under when it began (0: it was not).
    since: u64,
    /// Keeps the key's notice bucket subscribed while the load runs.
    _listening: Listening,
}

impl<K, V> Tier<K, V>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn loads(&self) -> MutexGuard<'_, BTreeMap<String, Loads<K>>> {
        self.loading.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a load of `key` at `entry`, before its first read, until the returned
    /// registration is dropped, and makes this replica hear the key's notices first.
    pub(crate) async fn loading(self: &Arc<Self>, entry: &EntryKey, key: &K) -> Loading<K, V> {
        let value_key = entry.value().to_owned();
        let listening = self.replica.store().listen(entry).await;
        let since = listening.epoch();
        let mut loads = self.loads();
        let loads = loads.entry(value_key.clone()).or_insert_with(|| Loads {
            key: key.clone(),
            fence: 0,
            count: 0,
            since,
        });
        loads.count += 1;
        loads.since = loads.since.min(since);
        Loading {
            tier: self.clone(),
            value_key,
            since,
            _listening: listening,
        }
    }

    /// The keys of the running loads any of which began before subscription epoch
    /// `before`: they may have read before a notice this replica missed.
    pub(crate) fn loads_begun_before(&self, before: u64) -> Vec<K> {
        (self.loads().values())
            .filter(|loads| loads.since < before)
            .map(|loads| loads.key.clone())
            .collect()
    }

    /// The key of a running load that `notice` (from another replica) makes older than
    /// the store: a publish or an invalidation under a fence above every fence its reads
    /// returned. A released lease changes no value.
    pub(crate) fn outdated_by(&self, notice: &Notice) -> Option<K> {
        if notice.kind == NoticeKind::Released {
            return None;
        }
        let loads = self.loads();
        let loads = loads.get(&notice.key)?;
        (notice.fence > loads.fence).then(|| loads.key.clone())
    }
}

impl<K, V> Loading<K, V> {
    /// The subscription epoch this load's key was heard under when it began (0: it was
    /// not: no subscription, or its bucket not confirmed in time).
    pub(crate) fn since(&self) -> u64 {
        self.since
    }

    /// A read of this load returned `fence`: notices at or below it are not news to it.
    pub(super) fn saw(&self, fence: u64) {
        let mut loads = self
            .tier
            .loading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(loads) = loads.get_mut(&self.value_key) {
            loads.fence = loads.fence.max(fence);
        }
    }
}

impl<K, V> Drop for Loading<K, V> {
    fn drop(&mut self) {
        let mut loads = self
            .tier
            .loading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = loads.get_mut(&self.value_key) {
            entry.count -= 1;
            if entry.count == 0 {
                loads.remove(&self.value_key);
            }
        }
    }
}
