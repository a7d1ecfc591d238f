//! A lease this replica holds on one key of the shared store.
//!
//! The read script grants it, named by this replica's token, together with a new fence;
//! the publish script ends it (the value is stored, or refused, and the lease deleted in
//! one step). Whatever else ends a load (the origin failed, the fail-safe answered, the
//! caller or the runtime dropped the load, the publish got no answer) gives it back here,
//! so the replicas waiting on the key can take it at once instead of waiting out its TTL.
//! Giving it back is sent on the background threads, and owed until the store takes it
//! ([`Replica::release`]), so it needs no runtime of the caller's and survives an outage.
//!
//! While the load runs, the lease beats every [`BEAT`] (a sign of life in the lease), so
//! replicas waiting on it take it over from a holder gone silent (its grant's reply lost,
//! its process stalled or dead) after a few missed beats, and never from one whose origin
//! is merely slow.
use super::background;
use super::keys::EntryKey;
use super::replica::Replica;
use super::store::LeaseToken;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How often a held lease beats. Waiters take over after three silent beats at most.
pub(crate) const BEAT: Duration = Duration::from_millis(100);

/// The lease of `key` named `token` under `fence`, released when dropped unless a publish
/// the store answered ended it.
pub(crate) struct HeldLease {
    replica: Arc<Replica>,
    key: EntryKey,
    token: LeaseToken,
    /// Still ours to give back: no publish has ended it.
    armed: bool,
    /// Beats while the load runs.
    beating: JoinHandle<()>,
}

impl HeldLease {
    pub(crate) fn new(replica: Arc<Replica>, key: EntryKey, token: LeaseToken) -> Self {
        let beating = background::handle().spawn({
            let (replica, key) = (replica.clone(), key.clone());
            async move {
                loop {
                    tokio::time::sleep(BEAT).await;
                    // Lost (taken over or lapsed): nothing left to keep alive.
                    if let Ok(false) = replica.store().beat(&key, token).await {
                        return;
                    }
                }
            }
        });
        HeldLease {
            replica,
            key,
            token,
            armed: true,
            beating,
        }
    }

    pub(crate) fn token(&self) -> LeaseToken {
        self.token
    }

    /// A publish the store answered ran under this lease: stored or refused, the script
    /// ended the lease.
    pub(crate) fn published(mut self) {
        self.armed = false;
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.beating.abort();
        if self.armed {
            // Only our token releases it: a lease that lapsed and was taken stays.
            (self.replica).release(self.key.clone(), self.token, false);
        }
    }
}
