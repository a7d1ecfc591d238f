//! A lease this replica holds on one key of the shared store.
//!
//! The read script grants it together with a new fence; the publish script consumes it
//! (the value is stored and the lease deleted in one step). Whatever else ends a load
//! (the origin failed, the fail-safe answered, the caller or the runtime dropped the
//! load) gives it back here, so the replicas waiting on the key can take it at once
//! instead of waiting out its TTL. Giving it back is best effort: without a runtime to
//! send it on, or when the store does not answer, the lease lapses with its TTL.
use super::keys::EntryKey;
use super::tiered::Remote;
use std::sync::Arc;

/// The lease of `key` under `fence`, released when dropped unless a publish took it.
pub(crate) struct HeldLease {
    remote: Arc<Remote>,
    key: EntryKey,
    fence: u64,
    /// Still ours to give back: no publish has taken it.
    armed: bool,
}

impl HeldLease {
    pub(crate) fn new(remote: Arc<Remote>, key: EntryKey, fence: u64) -> Self {
        HeldLease {
            remote,
            key,
            fence,
            armed: true,
        }
    }

    /// A publish ran under this lease: stored or refused, the script dealt with the lease.
    pub(crate) fn published(mut self) {
        self.armed = false;
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Drop cannot wait: the release goes out as a task of the runtime this ran on.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (remote, key, fence) = (self.remote.clone(), self.key.clone(), self.fence);
        drop(runtime.spawn(async move {
            // Only our fence releases it: a lease that lapsed and was taken stays.
            let _ = remote.store().release(&key, fence).await;
        }));
    }
}
