//! Per-cache counters and their snapshot.
//!
//! Hits bump one relaxed counter on a cache line of its own, whose previous value also
//! draws one hit in 64 for the hot keys; everything else here (admission waits, shedding,
//! the age of stale values) is recorded on the miss and refresh paths only.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A snapshot of one cache's counters since it was built.
///
/// ```
/// let stats = stampede_runtime::Stats::default();
/// assert_eq!(stats.origin_calls, 0);
/// ```
///
/// It is `Serialize` (fields by name, durations as serde writes them), for exporting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Calls answered with a fresh value.
    pub fresh_hits: u64,
    /// Calls answered with a stale value (stale window, fail-safe fallback, or a timed-out
    /// caller given the last value).
    pub stale_hits: u64,
    /// Calls that found nothing servable and waited for a load.
    pub misses: u64,
    /// Callers that waited for a load another caller was already running (a waiter that
    /// takes over an abandoned load and joins again is still one).
    pub coalesced: u64,
    /// Times the origin was called (with caching disabled, every call).
    pub origin_calls: u64,
    /// Refreshes XFetch started before the value stopped being fresh.
    pub early_refreshes: u64,
    /// Origin calls that failed or panicked, in either leader mode.
    pub refresh_errors: u64,
    /// Failed or shed loads answered with the last value under `stale_if_error`.
    pub fallbacks: u64,
    /// Callers whose deadline passed.
    pub timeouts: u64,
    /// Loads running right now: coalesced or not, including those an invalidation
    /// detached from their key.
    pub in_flight: u64,
    /// Values held in this process's memory now (moka's count after its pending
    /// maintenance: expired and evicted entries are gone from it).
    pub entries: u64,
    /// Loads that got a permit of their admission semaphore.
    pub admitted: u64,
    /// Loads shed because their admission queue did not move within `queue_timeout`, or
    /// low-priority loads shed at once (answered with a stale value where the policy
    /// allows one, else `Overloaded`).
    pub shed: u64,
    /// Low-priority loads shed at once because their admission's queue was at its
    /// `low_queue` (see [`Priority`](crate::Priority)), whatever answered their callers
    /// (a stale value from the shared store is not counted in `shed`).
    pub shed_early: u64,
    /// Total time loads spent queued for an admission permit, admitted or shed.
    pub admission_wait_total: Duration,
    /// The longest single wait for an admission permit.
    pub admission_wait_max: Duration,
    /// Age (time since it was loaded) of the oldest value served in place of a fresh one:
    /// in the stale window, by the fail-safe, to a timed-out caller, or for a shed load.
    pub oldest_stale_served: Duration,
    /// Loads answered by a value another replica had put in the shared store (no origin
    /// call).
    pub shared_hits: u64,
    /// Misses whose shared-store read found nothing servable, so the origin was called
    /// (here, or on the replica whose load they waited for).
    pub shared_misses: u64,
    /// Loads that could not reach the shared store (degraded: memory and in-process
    /// coalescing only).
    pub backend_errors: u64,
    /// Misses that found another replica loading the key (holding its lease) and waited
    /// for that replica's value instead of calling the origin.
    pub lease_waits: u64,
    /// Leases this replica took over: their holder had not published for longer than the
    /// key's recompute time warrants (or held the lease past this replica's `lease`, or a
    /// refresh had too little of the stale window left), so this one loaded too. Counted
    /// whether it waited for the holder first or found it overdue at its first read.
    pub lease_takeovers: u64,
    /// Loaded values the shared store refused: a newer load took the key's lease, an
    /// invalidation passed, or the value was read at a source version older than one
    /// invalidated since. Their callers still got them; nobody else will.
    pub publish_refused: u64,
    /// Loads that asked for the key's fleet lease and got it (takeovers included).
    pub leases_won: u64,
    /// Loads that asked for the key's fleet lease and found another replica holding it:
    /// a miss waits for that replica's value, a refresh leaves the refresh to it.
    pub leases_lost: u64,
    /// Total time misses spent waiting for another replica's lease (its value, its
    /// release, or a takeover).
    pub lease_wait_total: Duration,
    /// The longest single wait for another replica's lease.
    pub lease_wait_max: Duration,
    /// Loads that held the key's lease and whose publish the fence refused: the lease
    /// had lapsed and another replica took it over, or an invalidation passed, before
    /// the value was ready (a frozen or slow owner; set `lease` above the slowest load).
    pub leases_expired: u64,
    /// Stale-window, early or forced refreshes whose value the fence refused (a newer
    /// load or an invalidation got there first): counted in `publish_refused` too.
    pub refreshes_refused: u64,
    /// Calls answered with an error kept by negative caching (`cache_errors`), without an
    /// origin call.
    pub error_hits: u64,
    /// Loads whose value was not stored because one of its tags was invalidated while
    /// they ran (their callers still got it).
    pub tag_fenced: u64,
    /// Origin calls abandoned past the policy's `load_timeout` (also counted in
    /// `refresh_errors`): their lease and permit given back, their callers answered by a
    /// stale or fail-safe value where one could stand in, else `LoadTimeout`.
    pub load_timeouts: u64,
}

/// One replica's side of a fleet-wide admission
/// ([`Runtime::fleet_admission`](crate::Runtime::fleet_admission)): the permits it holds
/// in the shared store, and how often it fell back to its local share.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct FleetAdmissionStats {
    /// Permits of the whole fleet's that this replica's loads hold now.
    pub held: u64,
    /// Loads holding a permit of the replica's local share now (the store unreachable).
    pub local: u64,
    /// Loads that took a local permit because the store could not be asked.
    pub local_total: u64,
    /// Permits that lapsed while their load ran (renewals that did not reach the store
    /// within `permit_ttl`): the fleet may have seen one origin call above its limit for
    /// each, until the load ended.
    pub lapsed: u64,
}

/// The counters of a runtime's shared store ([`Runtime::backend_stats`](crate::Runtime::backend_stats)),
/// over every cache of that runtime. `Serialize`, like [`Stats`], for exporting.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct BackendStats {
    /// Reads that found an envelope.
    pub hits: u64,
    /// Reads that found nothing.
    pub misses: u64,
    /// Calls that failed or timed out.
    pub errors: u64,
    /// Calls that timed out whose answer then came within the grace after the timeout:
    /// the server is up and answered late (a slow moment, or this process too busy to
    /// read it in time). They do not count against the circuit breaker.
    pub late_answers: u64,
    /// Leases released by their token after the reply that granted them was lost, so no
    /// replica waited for a lease nobody would publish. Counts the releases Redis
    /// confirmed: one whose own reply was lost too took effect unconfirmed, and is not
    /// counted.
    pub orphaned_leases_released: u64,
    /// Stored bytes that did not decode (corrupt, another version or type): read as misses.
    pub decode_failures: u64,
    /// Notices this replica sent (publishes, invalidations).
    pub notices_sent: u64,
    /// Notices received from any replica. A replica hears the notices of the keys it has
    /// a use for (a load running, a memory copy) and of keys that share a notice bucket
    /// with them, not of every key.
    pub notices_received: u64,
    /// Notice buckets this replica uses now, out of 4,096 (subscribed, or being
    /// subscribed): the keys it loads or keeps copies of fall in them, and those its loads
    /// used in the last minute.
    pub notice_buckets: u64,
    /// This replica's subscription to notices is up. While it is down, notices from other
    /// replicas may be missed: a tiered replica drops its copies of what Redis holds when it
    /// goes down and again when it is back, and makes none in between (each call reads
    /// Redis), so no copy outlives a notice it missed.
    pub subscribed: bool,
    /// Loads use memory and in-process coalescing only: the circuit breaker is open or
    /// probing, or `problem` says the store cannot be used as configured.
    pub degraded_now: bool,
    /// Why the shared store cannot be used as configured, with the setting to change: a
    /// refused password, a command the ACL user may not run, a certificate not trusted,
    /// Sentinels that do not answer. Seen within the last 30 s (it clears once fixed);
    /// each cause is also logged once at error level. Never holds a secret.
    pub problem: Option<String>,
    /// How often the breaker opened.
    pub breaker_opened: u64,
    /// Total time spent degraded.
    pub degraded: Duration,
    /// Invalidations applied here but not yet taken by the store (replayed before this
    /// replica reads it again).
    pub invalidations_queued: u64,
    /// Acknowledged writes every replica listed as hearing answered.
    pub acknowledged_writes: u64,
    /// Acknowledged writes that waited out a replica's hearing lease instead: one did not
    /// answer in time (frozen, cut off, gone without leaving the registry), or the
    /// registry could not be read or was younger than a lease.
    pub acknowledged_writes_waited_out: u64,
    /// This replica's hearing lease holds now: its tiered copies are served (see
    /// `hearing_lease` in the configuration guide). Always `true` on the redis backend,
    /// which keeps no copies and no lease.
    pub hearing_lease_holds: bool,
}

/// A cache as its runtime sees it, whatever its key and value types: a name and counters.
pub(crate) trait Observed: Send + Sync {
    fn name(&self) -> &Arc<str>;
    fn stats(&self) -> Stats;
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) fresh_hits: HitCounter,
    pub(crate) stale_hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) coalesced: Counter,
    pub(crate) origin_calls: Counter,
    pub(crate) early_refreshes: Counter,
    pub(crate) refresh_errors: Counter,
    pub(crate) fallbacks: Counter,
    pub(crate) timeouts: Counter,
    pub(crate) admitted: Counter,
    pub(crate) shed: Counter,
    pub(crate) shed_early: Counter,
    pub(crate) admission_wait: Timer,
    pub(crate) oldest_stale_served: Longest,
    pub(crate) shared_hits: Counter,
    pub(crate) shared_misses: Counter,
    pub(crate) backend_errors: Counter,
    pub(crate) lease_waits: Counter,
    pub(crate) lease_takeovers: Counter,
    pub(crate) publish_refused: Counter,
    pub(crate) leases_won: Counter,
    pub(crate) leases_lost: Counter,
    pub(crate) lease_wait: Timer,
    pub(crate) leases_expired: Counter,
    pub(crate) refreshes_refused: Counter,
    pub(crate) error_hits: Counter,
    pub(crate) tag_fenced: Counter,
    pub(crate) load_timeouts: Counter,
}

impl Counters {
    pub(crate) fn snapshot(&self, in_flight: usize, entries: u64) -> Stats {
        Stats {
            fresh_hits: self.fresh_hits.0.get(),
            stale_hits: self.stale_hits.get(),
            misses: self.misses.get(),
            coalesced: self.coalesced.get(),
            origin_calls: self.origin_calls.get(),
            early_refreshes: self.early_refreshes.get(),
            refresh_errors: self.refresh_errors.get(),
            fallbacks: self.fallbacks.get(),
            timeouts: self.timeouts.get(),
            in_flight: in_flight as u64,
            entries,
            admitted: self.admitted.get(),
            shed: self.shed.get(),
            shed_early: self.shed_early.get(),
            admission_wait_total: self.admission_wait.total.get(),
            admission_wait_max: self.admission_wait.longest.get(),
            oldest_stale_served: self.oldest_stale_served.get(),
            shared_hits: self.shared_hits.get(),
            shared_misses: self.shared_misses.get(),
            backend_errors: self.backend_errors.get(),
            lease_waits: self.lease_waits.get(),
            lease_takeovers: self.lease_takeovers.get(),
            publish_refused: self.publish_refused.get(),
            leases_won: self.leases_won.get(),
            leases_lost: self.leases_lost.get(),
            lease_wait_total: self.lease_wait.total.get(),
            lease_wait_max: self.lease_wait.longest.get(),
            leases_expired: self.leases_expired.get(),
            refreshes_refused: self.refreshes_refused.get(),
            error_hits: self.error_hits.get(),
            tag_fenced: self.tag_fenced.get(),
            load_timeouts: self.load_timeouts.get(),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn bump(&self) {
        // Counts only; nothing is ordered by them.
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The fresh-hit counter, written by every thread that hits the cache: alone on its cache
/// line (two 64-byte lines: adjacent-line prefetching pairs them on x86), so those writes
/// do not invalidate the line of the cache's read-mostly fields every hit reads. A counter
/// striped per thread measured 16 more instructions per hit, for no throughput visible on
/// two cores, so the line stays shared by the threads that bump it.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct HitCounter(Counter);

impl HitCounter {
    /// Counts a hit; `true` for one in [`HIT_SAMPLE`], whose key the hot keys sample. The
    /// count the add returns anyway draws it, scrambled (a Weyl sequence's top bits), so
    /// that callers taking turns in a fixed pattern are not always sampled on the same key:
    /// a multiply, a shift and a branch on the hit.
    ///
    /// [`HIT_SAMPLE`]: crate::hot_keys::HIT_SAMPLE
    #[inline(always)]
    pub(crate) fn bump_sampled(&self) -> bool {
        const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
        const SHIFT: u32 = 64 - crate::hot_keys::HIT_SAMPLE.trailing_zeros();
        let before = (self.0).0.fetch_add(1, Ordering::Relaxed);
        before.wrapping_mul(PHI) >> SHIFT == 0
    }
}

/// The longest of the durations recorded, in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct Longest(AtomicU64);

impl Longest {
    pub(crate) fn record(&self, duration: Duration) {
        self.0.fetch_max(nanos(duration), Ordering::Relaxed);
    }

    fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// The sum and the longest of the durations recorded.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    total: Total,
    longest: Longest,
}

impl Timer {
    pub(crate) fn record(&self, duration: Duration) {
        self.total.0.fetch_add(nanos(duration), Ordering::Relaxed);
        self.longest.record(duration);
    }
}

#[derive(Debug, Default)]
struct Total(AtomicU64);

impl Total {
    fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// Nanoseconds, saturating: 584 years of waiting fit, which is enough.
fn nanos(duration: Duration) -> u64 {
    duration.as_nanos().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests;
