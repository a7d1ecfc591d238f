//! A miss's wait for the replica that holds its key's lease: the holder loads the key for
//! the fleet, and this replica waits for its notice (a value stored, an invalidation, the
//! lease given back), reading again after each, until the key can be answered or loaded
//! here. It defers to the holder only while the holder shows signs of life (see
//! [`Inner::quiet_after`]) and never longer than its own lease: each read asks the store
//! to take the lease over past either (fenced, so the old holder's late publish is
//! refused).
use super::shared::Reads;
use super::Inner;
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::shared::store::{Holder, Listening, Notice, Wake};
use crate::shared::tier::Found;
use std::time::Duration;
use tracing::Instrument;

/// One wait, from the first read that found the lease held to the read that did not:
/// one span (naming the holder) and one timing for all its rounds.
pub(super) struct LeaseWait {
    since: Instant,
    span: tracing::Span,
    /// The notice that ended the last round, if one did.
    noticed: Option<Notice>,
    /// Listening to the key again while waiting, when the load's own went deaf; heard no
    /// longer than the wait.
    relistened: Option<Listening>,
}

impl LeaseWait {
    /// A wait begins: counted, and a batch stops waiting for this key (another replica
    /// loads it).
    pub(super) fn begin<K: CacheKey, V: LocalValue, E: CacheError>(inner: &Inner<K, V, E>) -> Self {
        super::batch::parked();
        inner.counters.lease_waits.bump();
        LeaseWait {
            since: inner.clock.precise(),
            span: tracing::debug_span!(
                target: "stampede",
                "lease_wait",
                cache = %inner.policy.name(),
                owner = tracing::field::Empty,
            ),
            noticed: None,
            relistened: None,
        }
    }

    /// One round: `found` says `holder` holds the lease. Listens to the key (again, if
    /// the load's own listening went deaf), reads it again (or takes the value the
    /// holder's notice carried), and if the lease is still held, waits for the holder's
    /// notice, its silence, or this cache's own bound. `recompute`: the key's last
    /// recompute time, which sets how long a silent holder is waited for.
    pub(super) async fn round<K: CacheKey, V: LocalValue, E: CacheError>(
        &mut self,
        reads: &Reads<'_, K, V, E>,
        found: Found<K, V>,
        holder: Holder,
        recompute: Option<Duration>,
    ) -> Found<K, V> {
        let (inner, tier) = (reads.inner, reads.tier);
        if let Some(owner) = holder.replica {
            (self.span).record(
                "owner",
                tracing::field::display(format_args!("{owner:08x}")),
            );
        }
        let quiet = inner.quiet_after(recompute);
        // The bucket this load listened to may not be heard any more (the subscription
        // came back, or its confirmation timed out): listen again, so the wait ends on the
        // holder's notice, not its deadline.
        if !tier.hears(&found.key) {
            self.relistened = Some(tier.replica.store().listen(&found.key).await);
        }
        let wake = tier.watch(&found.key);
        let read_fence = found.read.as_ref().map_or(0, |read| read.fence);
        let Found { key, watching, .. } = found;
        // The holder's publish brought its value: no read needed, unless the value cannot
        // be served as it is (then the read decides).
        let carried =
            (self.noticed.take()).and_then(|notice| tier.read_in_notice(&notice, read_fence));
        let found = match carried {
            Some(carried) => {
                let (now, generation) = (inner.clock.now(), inner.next_generation());
                let read = tier.take_read(key, carried, None, now, generation, watching);
                let read = read.await;
                if read.envelope.is_some() {
                    read
                } else {
                    let Found { key, watching, .. } = read;
                    reads.read(key, recompute, watching).await
                }
            }
            None => {
                let read = reads.read(key, recompute, watching);
                read.instrument(self.span.clone()).await
            }
        };
        if let Some(holder) = found.holder() {
            // Until a notice, the holder goes quiet, or this wait is overdue.
            let own_lease = inner.policy.lease();
            let wait = (holder.remaining)
                .min(quiet.saturating_sub(holder.silent_for))
                .min(own_lease.saturating_sub(holder.held_for));
            let woken = wait_for_notice(wake, tier.subscription(), wait.max(MIN_WAIT));
            self.noticed = woken.instrument(self.span.clone()).await;
        }
        found
    }

    /// The wait is over: its time is recorded.
    pub(super) fn end<K: CacheKey, V: LocalValue, E: CacheError>(self, inner: &Inner<K, V, E>) {
        let waited = inner.clock.precise().saturating_duration_since(self.since);
        inner.counters.lease_wait.record(waited);
    }
}

/// Until a notice for the key, or for at most `wait`. A subscription that is down (not up
/// yet at start-up, or dropped) cannot bring the notice: the waiter waits for it to come
/// up instead, then reads again at once.
async fn wait_for_notice(
    wake: tokio::sync::oneshot::Receiver<Wake>,
    mut subscription: crate::shared::subscribed::SubscribedWatch,
    wait: Duration,
) -> Option<Notice> {
    let woken = async {
        match wake.await {
            Ok(Wake::Notice(notice)) => Some(notice),
            Ok(Wake::SubscriptionLost) | Err(_) => {
                subscription.up().await;
                None
            }
        }
    };
    tokio::time::timeout(wait, woken).await.ok().flatten()
}

/// The shortest wait between two reads of a key whose lease another replica holds.
const MIN_WAIT: Duration = Duration::from_millis(1);
