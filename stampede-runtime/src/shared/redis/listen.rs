//! Which notices this replica hears: a key's notices go to one of [`BUCKETS`] channels,
//! chosen by a hash of its value key, and a replica subscribes to a bucket only while it
//! has a use for the keys in it (a load running, a waiter, a memory copy).
//!
//! With one channel for everything, every replica received every notice of every key:
//! a fleet of R replicas writing W keys per second made Redis deliver R × W messages,
//! and every replica decode W of them, most about keys it neither held nor waited for.
//! With buckets, a replica hears the writes of the buckets its keys fall in: what it
//! receives per write depends on how many keys it holds, not on how many replicas there
//! are. A replica holding keys in every bucket hears everything, as before.
//!
//! # A notice registered before the read
//! A load subscribes to its key's bucket, and waits for the subscription to be confirmed,
//! before its first read ([`Client::listen`]): any write after that read announces itself
//! on a channel this replica already hears. Only loads that find their bucket
//! unconfirmed pay for it (one round trip on the subscription's connection; concurrent
//! ones each send their `SUBSCRIBE`, which Redis takes as one). A bucket stays subscribed
//! while anything uses it, for [`LINGER`] after the last load, and as long as a memory
//! copy of one of its keys lives. A subscription that cannot be confirmed in time (or a
//! key whose shard's breaker is open) leaves the load deaf to its key, as a load is while
//! the whole subscription is down: it keeps no copy that relies on notices, and a wait
//! ends by its own deadline.
//!
//! A bucket is confirmed only by the reply to a load's own `SUBSCRIBE`, and counts only
//! under the subscription epoch it was sent in: after the subscription drops and comes
//! back, every bucket is confirmed again before a load relies on it (its `SUBSCRIBE`
//! again, which Redis answers even when the client already restored the channel). A
//! subscribe push is not taken as a confirmation: it may come from a connection already
//! replaced (a cluster's subscriber moved to another node). Idle buckets are unsubscribed
//! by the heartbeat under the write side of [`Client::subscribing`], so an unsubscribe
//! never overtakes a load's subscribe.
//!
//! Tag notices stay on the prefix's own channel, which every replica hears: any replica
//! may hold entries carrying any tag.
use super::Client;
use crate::clock::StoreInstant as Instant;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

/// How many channels a prefix's key notices are spread over. A replica holds at most
/// this many subscriptions, and one holding `h` keys hears about `h / BUCKETS` of the
/// writes to keys it does not hold (while `h` is well below it).
pub(crate) const BUCKETS: u16 = 4096;

/// How long a bucket stays subscribed after its last load ended: a hot key's next load
/// finds it subscribed and pays no round trip for it.
pub(crate) const LINGER: Duration = Duration::from_secs(60);

/// [`LINGER`], or a simulation's own on its thread: a short one lets buckets go idle,
/// and come back, within a simulated run.
fn linger() -> Duration {
    #[cfg(feature = "simulation")]
    if let Some(linger) = SIMULATED_LINGER.with(std::cell::Cell::get) {
        return linger;
    }
    LINGER
}

#[cfg(feature = "simulation")]
thread_local! {
    static SIMULATED_LINGER: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
    static SIMULATED_BUCKETS: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

/// Sets how many buckets the keys of replicas on this thread (a simulation's) are spread
/// over; `None` goes back to [`BUCKETS`]. Every replica of one simulation must see the
/// same count, as every build does.
#[cfg(feature = "simulation")]
pub(crate) fn simulate_buckets(buckets: Option<u16>) {
    SIMULATED_BUCKETS.with(|cell| cell.set(buckets.map(|n| n.max(1))));
}

/// Sets the linger of buckets released on this thread (a simulation's); `None` goes back
/// to [`LINGER`].
#[cfg(feature = "simulation")]
pub(crate) fn simulate_linger(linger: Option<Duration>) {
    SIMULATED_LINGER.with(|cell| cell.set(linger));
}

/// The bucket of `value_key`: FNV-1a, the same in every replica and every build.
pub(crate) fn bucket_of(value_key: &str) -> u16 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in value_key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(buckets())) as u16
}

/// [`BUCKETS`], or a simulation's own on its thread: a few make keys share buckets.
fn buckets() -> u16 {
    #[cfg(feature = "simulation")]
    if let Some(buckets) = SIMULATED_BUCKETS.with(std::cell::Cell::get) {
        return buckets;
    }
    BUCKETS
}

/// The channel of `bucket` under the prefix's channel `channel`.
pub(crate) fn bucket_channel(channel: &str, bucket: u16) -> String {
    format!("{channel}:{bucket:03x}")
}

/// The channel only the replica `replica` listens to under the prefix's channel
/// `channel`: its hearing lease's renewals and the acknowledgements its invalidations
/// asked for.
pub(crate) fn replica_channel(channel: &str, replica: &str) -> String {
    format!("{channel}:r:{replica}")
}

/// One bucket's use.
#[derive(Debug)]
struct Bucket {
    /// The subscription epoch its `SUBSCRIBE` was last confirmed under (0: never).
    heard_in: u64,
    /// Loads using it now.
    users: u32,
    /// Memory copies of its keys that rely on its notices.
    copies: u32,
    /// Kept subscribed until then at least (lingering after the last load).
    until: Instant,
}

impl Bucket {
    fn unheard() -> Self {
        Bucket {
            heard_in: 0,
            users: 0,
            copies: 0,
            until: Instant::now(),
        }
    }

    fn in_use(&self, now: Instant) -> bool {
        self.users > 0 || self.copies > 0 || self.until > now
    }
}

/// The buckets this replica uses, and under which epoch each was confirmed.
#[derive(Default)]
pub(crate) struct Interest {
    buckets: Mutex<BTreeMap<u16, Bucket>>,
}

impl Interest {
    fn buckets(&self) -> MutexGuard<'_, BTreeMap<u16, Bucket>> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One more load uses `bucket`; `true` if it is confirmed under `epoch` already.
    pub(crate) fn hold(&self, bucket: u16, epoch: u64) -> bool {
        let mut buckets = self.buckets();
        let held = buckets.entry(bucket).or_insert_with(Bucket::unheard);
        held.users += 1;
        epoch != 0 && held.heard_in == epoch
    }

    /// A load that used `bucket` ended: it stays subscribed for `linger` more.
    pub(crate) fn release(&self, bucket: u16, linger: Duration) {
        let mut buckets = self.buckets();
        if let Some(held) = buckets.get_mut(&bucket) {
            held.users = held.users.saturating_sub(1);
            held.until = held.until.max(Instant::now() + linger);
        }
    }

    /// A memory copy of a key in `bucket` relies on its notices until
    /// [`Interest::copy_gone`].
    pub(crate) fn copy_kept(&self, bucket: u16) {
        let mut buckets = self.buckets();
        buckets.entry(bucket).or_insert_with(Bucket::unheard).copies += 1;
    }

    /// A copy [`Interest::copy_kept`] counted is gone (dropped, replaced, expired).
    pub(crate) fn copy_gone(&self, bucket: u16) {
        if let Some(held) = self.buckets().get_mut(&bucket) {
            held.copies = held.copies.saturating_sub(1);
        }
    }

    /// Redis confirmed the subscription of `bucket` while the subscription's epoch was
    /// `epoch` (0: none is up, which confirms nothing).
    pub(crate) fn confirmed(&self, bucket: u16, epoch: u64) {
        if epoch == 0 {
            return;
        }
        if let Some(held) = self.buckets().get_mut(&bucket) {
            held.heard_in = held.heard_in.max(epoch);
        }
    }

    /// Whether `bucket` is confirmed under `epoch`.
    pub(crate) fn heard(&self, bucket: u16, epoch: u64) -> bool {
        epoch != 0
            && self
                .buckets()
                .get(&bucket)
                .is_some_and(|b| b.heard_in == epoch)
    }

    /// Forgets the buckets nothing uses any more and returns them, to unsubscribe.
    pub(crate) fn idle(&self, now: Instant) -> Vec<u16> {
        let mut idle = Vec::new();
        self.buckets().retain(|&bucket, held| {
            let keep = held.in_use(now);
            if !keep {
                idle.push(bucket);
            }
            keep
        });
        idle
    }

    /// Whether [`Interest::idle`] would find any.
    pub(crate) fn any_idle(&self, now: Instant) -> bool {
        (self.buckets().values()).any(|held| !held.in_use(now))
    }

    /// How many buckets are in use or kept.
    pub(crate) fn len(&self) -> usize {
        self.buckets().len()
    }
}

/// A load's use of its key's bucket, released when dropped.
pub(crate) struct Hold {
    client: Weak<Client>,
    bucket: u16,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(client) = self.client.upgrade() {
            client.interest.release(self.bucket, linger());
        }
    }
}

impl Client {
    /// Subscribes to the bucket of `value_key` unless it is confirmed already, and holds
    /// it while the returned guard lives. Returns the subscription epoch the bucket is
    /// heard under, 0 if it is not (no subscription, or no confirmation within the
    /// response timeout).
    pub(super) async fn listen(self: &Arc<Self>, value_key: &str) -> (u64, Hold) {
        let bucket = bucket_of(value_key);
        let epoch = self.hub.hearing();
        let heard = self.interest.hold(bucket, epoch);
        let hold = Hold {
            client: Arc::downgrade(self),
            bucket,
        };
        if heard || epoch == 0 {
            return (epoch, hold);
        }
        // The key's shard is failing fast: its read will too, and a load without the
        // store relies on no notice. Waiting out a subscribe first would only double the
        // time a black hole takes to show.
        let (_, breaker) = self.shards.for_key(value_key);
        if breaker.fails_fast() {
            return (0, hold);
        }
        let channel = bucket_channel(&self.channel, bucket);
        let subscribe = async {
            // Shared with other subscribes; an unsubscribe waits for them, and they for it.
            let _no_unsubscribe_meanwhile = self.subscribing.read().await;
            if self.interest.heard(bucket, epoch) {
                return;
            }
            let Some(mut connection) = self.listener() else {
                return;
            };
            if connection.subscribe(&[channel]).await.is_ok() {
                self.interest.confirmed(bucket, epoch);
            }
        };
        let _ = tokio::time::timeout(self.config.response_timeout, subscribe).await;
        let now = self.hub.hearing();
        let heard = now == epoch && self.interest.heard(bucket, epoch);
        (if heard { epoch } else { 0 }, hold)
    }

    /// Unsubscribes from the buckets nothing uses any more (the heartbeat's, once a tick).
    pub(super) async fn unsubscribe_idle(&self) {
        // Most ticks find nothing idle: they wait for no subscribe in flight.
        if !self.interest.any_idle(Instant::now()) {
            return;
        }
        let _alone = self.subscribing.write().await;
        let idle = self.interest.idle(Instant::now());
        if idle.is_empty() {
            return;
        }
        let channels: Vec<String> = (idle.iter())
            .map(|&bucket| bucket_channel(&self.channel, bucket))
            .collect();
        let Some(mut connection) = self.listener() else {
            return;
        };
        let timeout = self.config.response_timeout;
        // Not answered: the buckets stay subscribed in Redis, and only cost their notices.
        let _ = tokio::time::timeout(timeout, connection.unsubscribe(&channels)).await;
    }

    /// A handle on the subscription's connection, once there is one.
    fn listener(&self) -> Option<super::connection::Listener> {
        self.listener
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_spread() {
        assert_eq!(
            bucket_of("stampede:3:v:{prices:1:42}"),
            bucket_of("stampede:3:v:{prices:1:42}")
        );
        let mut seen = std::collections::HashSet::new();
        for n in 0..10_000 {
            seen.insert(bucket_of(&format!("stampede:3:v:{{prices:1:{n}}}")));
        }
        // 4,096 × (1 − e^(−10,000/4,096)) ≈ 3,740 expected.
        assert!(
            seen.len() > 3_600,
            "10,000 keys fell in only {} buckets",
            seen.len()
        );
        let channel = bucket_channel("stampede:3:notices", 0xabc);
        assert_eq!(channel, "stampede:3:notices:abc");
    }

    #[test]
    fn a_bucket_is_heard_only_under_the_epoch_it_was_confirmed_in() {
        let interest = Interest::default();
        assert!(!interest.hold(7, 1), "not confirmed yet");
        interest.confirmed(7, 1);
        assert!(interest.heard(7, 1));
        assert!(!interest.heard(7, 2), "a new subscription confirms again");
        assert!(interest.hold(7, 1));
        interest.confirmed(7, 0);
        assert!(!interest.heard(8, 1), "never held");
        interest.confirmed(8, 1);
        assert!(
            !interest.heard(8, 1),
            "a confirmation nobody asked for keeps nothing"
        );
    }

    #[test]
    fn a_bucket_goes_idle_only_when_unused_and_unkept() {
        let interest = Interest::default();
        interest.hold(1, 1);
        interest.hold(2, 1);
        interest.hold(3, 1);
        let later = Instant::now() + Duration::from_secs(3600);
        assert!(interest.idle(later).is_empty(), "loads still use them");
        interest.release(1, Duration::ZERO);
        interest.release(2, Duration::from_secs(7200));
        interest.copy_kept(3);
        interest.copy_kept(3);
        interest.release(3, Duration::ZERO);
        assert!(interest.any_idle(later));
        assert_eq!(interest.idle(later), [1]);
        assert_eq!(interest.len(), 2);
        let much_later = later + Duration::from_secs(7200);
        assert_eq!(interest.idle(much_later), [2], "bucket 3's copies live on");
        interest.copy_gone(3);
        assert!(!interest.any_idle(much_later), "one copy is left");
        interest.copy_gone(3);
        assert_eq!(interest.idle(much_later), [3]);
    }
}
