//! A replica's hearing lease: how long its memory copies may be served without word from
//! Redis that every notice sent so far has reached them.
//!
//! A copy is dropped by the notice that retires it, so it is only as current as the
//! subscription that would carry that notice. Every quarter of the lease the replica
//! renews its entry in the shared store's registry of hearers and, in the same script,
//! publishes a message to itself (`shared/redis/hearing.rs`); Redis sends it down the
//! subscription after every notice published before it, and once every listener of the
//! replica has handled all of those (a passage, `shared/acknowledgement.rs`), the lease
//! runs until the moment the message was sent plus `hearing_lease`. A copy of what the
//! store holds (a *heard* copy, marked `HEARD`) is served only while the lease runs; past
//! it, a read goes to the store. So from a lease after a notice was published, every
//! replica has applied it or serves no heard copy: what an acknowledged write waits out
//! for a replica that does not answer.
use crate::clock::StoreInstant;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(feature = "redis")]
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// The end of a replica's hearing lease, read by every hit on a heard copy.
#[derive(Debug)]
pub(crate) struct HearingLease {
    lease: Duration,
    #[cfg(feature = "redis")]
    /// Kept by a tiered replica only: a replica of the redis backend keeps no copies, so
    /// its lease always holds and it renews nothing.
    kept: bool,
    /// Store-clock nanoseconds ([`HearingLease::moment`]) the lease runs until; 0: lapsed.
    until: AtomicU64,
    /// Half the lease, in nanoseconds: closer than this to its end, the precise clock
    /// decides whether it still holds.
    near_end: u64,
    #[cfg(feature = "redis")]
    /// The subscription epoch renewals count under (0 while none is up): a renewal sent
    /// under an earlier epoch arrives too late to count, since the subscription it
    /// confirmed is gone.
    epoch: Mutex<u64>,
    /// In a simulation, the moment the lease was made, which its moments count from: each
    /// simulated run's clock starts at the real time its runtime was made and runs on by
    /// simulated minutes, so one origin for the process (as the coarse clock's is) put a
    /// later run's early moments before it, all read as 0, and a lease read on them held
    /// as long as the run was behind (whether seed 2001438 failed depended on the runs
    /// before it in the process).
    #[cfg(feature = "simulation")]
    origin: StoreInstant,
}

impl HearingLease {
    // Only a store (the `redis` feature) makes and renews a lease.
    #[cfg(feature = "redis")]
    /// A lease of `lease`, renewed (`kept`) or one that always holds.
    pub(crate) fn new(lease: Duration, kept: bool) -> Self {
        Self {
            lease,
            kept,
            until: AtomicU64::new(if kept { 0 } else { u64::MAX }),
            near_end: (lease / 2).as_nanos() as u64,
            epoch: Mutex::new(0),
            #[cfg(feature = "simulation")]
            origin: StoreInstant::now(),
        }
    }

    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    // Only a store (the `redis` feature) makes and renews a lease.
    #[cfg(feature = "redis")]
    /// Whether the replica renews it (a tiered replica does).
    pub(crate) fn kept(&self) -> bool {
        self.kept
    }

    /// Whether heard copies may be served now: one atomic load and the coarse clock, and
    /// the precise clock within half a lease of its end. The coarse clock is as late as
    /// its thread was kept from running: were it trusted alone, a starved process would
    /// serve copies that long past the lease (as long as half a lease is covered).
    #[inline]
    pub(crate) fn holds(&self) -> bool {
        let until = self.until.load(Ordering::Acquire);
        let now = self.coarse_now();
        if now >= until {
            return false;
        }
        until - now >= self.near_end || self.moment(StoreInstant::now()) < until
    }

    // Only a store (the `redis` feature) makes and renews a lease.
    #[cfg(feature = "redis")]
    /// A message sent at `sent` under subscription `epoch` came back after every notice
    /// before it was handled: the lease runs to `sent + lease`, unless the subscription
    /// changed since.
    pub(crate) fn renew(&self, epoch: u64, sent: u64) {
        let current = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        if *current != 0 && *current == epoch {
            let until = sent.saturating_add(self.lease.as_nanos() as u64);
            self.until.fetch_max(until, Ordering::AcqRel);
        }
    }

    // Only a store (the `redis` feature) makes and renews a lease.
    #[cfg(feature = "redis")]
    /// The subscription came up under `epoch` (0: it dropped). Either way the lease lapses
    /// now: a copy is served again only once a message sent under the new subscription
    /// came back.
    pub(crate) fn subscription(&self, epoch: u64) {
        if !self.kept {
            return;
        }
        let mut current = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        *current = epoch;
        self.until.store(0, Ordering::Release);
    }

    /// The store-clock nanoseconds of `at`, as [`HearingLease::renew`] takes them.
    #[cfg(not(feature = "simulation"))]
    pub(crate) fn moment(&self, at: StoreInstant) -> u64 {
        crate::clock::store_nanos(at)
    }

    #[cfg(feature = "simulation")]
    pub(crate) fn moment(&self, at: StoreInstant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// Now, as [`HearingLease::moment`] counts: the coarse clock's reading (one atomic).
    #[cfg(not(feature = "simulation"))]
    fn coarse_now(&self) -> u64 {
        crate::clock::store_nanos_now()
    }

    #[cfg(feature = "simulation")]
    fn coarse_now(&self) -> u64 {
        self.moment(StoreInstant::now())
    }
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_counts_only_under_the_subscription_it_was_sent_under() {
        let lease = HearingLease::new(Duration::from_secs(60), true);
        let now = lease.moment(StoreInstant::now());
        lease.renew(0, now);
        assert!(!lease.holds(), "no subscription yet");
        lease.subscription(3);
        lease.renew(2, now);
        assert!(!lease.holds(), "sent under an earlier subscription");
        lease.renew(3, now);
        assert!(lease.holds());
        lease.subscription(0);
        assert!(!lease.holds(), "the subscription dropped");
        lease.renew(3, now);
        assert!(!lease.holds(), "too late for the dropped subscription");
    }
}
