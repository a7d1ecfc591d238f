//! A cache's steps on the shared store: connecting on first use, reading before the
//! origin (taking the key's lease, or waiting for the replica that holds it), publishing
//! under the lease's fence, what memory keeps, invalidating, and the notice listener that
//! keeps memory copies in line with the store.
use super::copies::Standing;
use super::load::{outcome, Purpose};
use super::{notices, Inner, LoadLeader};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::{Envelope, State};
use crate::remote::store::{Holder, Lease, LeaseFor, LeaseRequest, LeaseToken, Notice, Wake};
use crate::remote::tier::{Found, Tier, Wrote};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// This cache's side of the shared store if it is connected already.
    pub(super) fn connected_tier(&self) -> Option<&Arc<Tier<K, V>>> {
        self.remote.as_ref()?.tier.get()?.as_ref()
    }

    /// This cache's side of the shared store, connected on first use inside a Tokio
    /// runtime; `None` for the memory backend and `local` caches. The notice listener
    /// subscribes here, before the first read.
    pub(super) fn tier(&self) -> Option<&Arc<Tier<K, V>>> {
        let side = self.remote.as_ref()?;
        if let Some(tier) = side.tier.get() {
            return tier.as_ref();
        }
        // Outside Tokio the store cannot run: memory only, until a load inside one.
        tokio::runtime::Handle::try_current().ok()?;
        let tier = side.tier.get_or_init(|| {
            let remote = side.runtime.remote()?.clone();
            let events = remote.store().events();
            let tier = Arc::new(Tier::new(
                remote,
                side.codec,
                self.policy.name().clone(),
                self.policy.version(),
                side.keeps_memory,
                self.policy.capacity(),
                crate::memory::lifetime(&self.policy, self.clock.is_real_time()),
            ));
            // On the store's threads, so it outlives the runtime that first connected.
            crate::remote::background::spawn(notices::listen(self.me.clone(), events));
            Some(tier)
        });
        tier.as_ref()
    }

    /// Step 3 of a load, the shared store's part before the origin: the key's lease, or
    /// an answer without
    /// an origin call (a fresh value another replica stored; the value a refresh would
    /// replace while another replica refreshes it). A stale value in the store answers a
    /// detached miss's callers at once (`leader` is then taken and settled) and is
    /// refreshed through the lease; so is a fresh one XFetch draws early, on a backend
    /// that keeps no memory copy to draw on.
    pub(super) async fn read_remote(
        &self,
        key: &K,
        leader: &mut Option<LoadLeader<K, V, E>>,
        purpose: Purpose<V>,
    ) -> Ahead<K, V, E> {
        let (current, early, from_store) = match purpose {
            Purpose::Force => {
                let found = self
                    .find_remote(key, LeaseFor::Force, None, leader.as_ref())
                    .await;
                return Ahead::Load {
                    found,
                    stand_in: None,
                };
            }
            Purpose::Refresh { current, early } => (*current, early, false),
            Purpose::Miss { detached } => {
                let mut found = self
                    .find_remote(key, LeaseFor::Miss, None, leader.as_ref())
                    .await;
                let now = self.clock.now();
                let servable = (found.as_mut()).and_then(|found| {
                    found
                        .envelope
                        .take_if(|stored| stored.state(now) != State::Expired)
                });
                let Some(stored) = servable else {
                    return Ahead::Load {
                        found,
                        stand_in: None,
                    };
                };
                let early = if stored.state(now) == State::Fresh {
                    let early = self.draws_early_from_store(&stored, now);
                    let answer =
                        self.take_remote(key, leader.take(), found.as_ref(), stored.clone());
                    if !early {
                        return Ahead::Answered(answer);
                    }
                    self.counters.early_refreshes.bump();
                    true
                } else {
                    // Stale in the store: its callers get it at once when they need not
                    // wait for this task (detached).
                    self.count_stale(&stored, now);
                    if detached {
                        let value = Ok(stored.value.clone());
                        let copy =
                            self.memory_copy(key, found.as_ref(), stored.clone(), Standing::Stored);
                        // Answered: the waiters have their value.
                        let _ = self.settle(leader.take(), value, copy);
                    }
                    false
                };
                (stored, early, true)
            }
        };
        // One refresh for the fleet, through the lease.
        let refreshing_elsewhere = |leader: &mut Option<LoadLeader<K, V, E>>,
                                    current: Envelope<V>| {
            outcome("refreshing elsewhere");
            Ahead::Answered(self.settle(leader.take(), Ok(current.value), None))
        };
        let Ok(quiet) = self.left_to_holder(key, &current) else {
            return refreshing_elsewhere(leader, current);
        };
        let mut found = self
            .find_remote(key, LeaseFor::Refresh, quiet, leader.as_ref())
            .await;
        if let Some((found, holder)) = found.as_ref().and_then(|f| Some((f, f.holder()?))) {
            self.leave_refresh(found, holder, &current);
            return refreshing_elsewhere(leader, current);
        }
        // Past its freshness, any fresh value in the store is newer: another replica
        // refreshed it already. (Before it, an XFetch refresh cannot tell its own value
        // there from a newer one, and refreshes.)
        if !early && let Some(newer) = self.fresh_in(&mut found) {
            let answer = self.take_remote(key, leader.take(), found.as_ref(), newer);
            return Ahead::Answered(answer);
        }
        // A value found in the store answers the miss if its refresh fails.
        let stand_in = from_store.then_some(current);
        Ahead::Load { found, stand_in }
    }

    /// XFetch's draw for a fresh value read from the store, on a backend whose memory
    /// holds no copy for a hit to draw on (redis).
    fn draws_early_from_store(&self, stored: &Envelope<V>, now: Instant) -> bool {
        self.tier().is_some_and(|tier| !tier.keeps_memory) && self.refresh_early(stored, now)
    }

    /// The fresh value `found` holds, taken out of it.
    fn fresh_in(&self, found: &mut Option<Found<K, V>>) -> Option<Envelope<V>> {
        let now = self.clock.now();
        let found = found.as_mut()?;
        found
            .envelope
            .take_if(|stored| stored.state(now) == State::Fresh)
    }

    /// Answers with a fresh value another replica stored: no origin call. A lease the
    /// read took goes back when `found` is dropped.
    fn take_remote(
        &self,
        key: &K,
        leader: Option<LoadLeader<K, V, E>>,
        found: Option<&Found<K, V>>,
        stored: Envelope<V>,
    ) -> Result<V, E> {
        let value = Ok(stored.value.clone());
        let copy = self.memory_copy(key, found, stored, Standing::Stored);
        outcome("shared");
        self.settle(leader, value, copy)
    }

    /// What the shared store holds for `key`, counted, with the key's lease when `purpose`
    /// asks for it and nobody holds it. The load is registered with the tier from before
    /// the first read until `Found` is dropped, so a notice from another replica that
    /// outdates it detaches it, even one that arrives while the read is on its way.
    ///
    /// A miss whose lease another replica holds waits for that replica's notice (a value
    /// stored, an invalidation, the lease given back), registered before it reads again so
    /// a notice between the two is not missed. It defers to the holder only while the
    /// holder shows signs of life (see [`Inner::quiet_after`]) and never longer than its
    /// own lease: each read asks the store to take the lease over past either (fenced, so
    /// the old holder's late publish is refused). A refresh never waits: `held_after` says
    /// when it may take a live holder's lease over (the stale window ending).
    /// An uncoalesced cache takes no lease.
    ///
    /// Each read the store answers is one `flight`'s answer may rest on: the flight learns
    /// when it was sent, so a caller that joins it after that loads again (see
    /// [`Leader::rests_on`](crate::flight::Leader::rests_on)).
    pub(super) async fn find_remote(
        &self,
        key: &K,
        purpose: LeaseFor,
        held_after: Option<Duration>,
        flight: Option<&LoadLeader<K, V, E>>,
    ) -> Option<Found<K, V>> {
        let tier = self.tier()?;
        let entry = tier.address(key)?;
        let watching = tier.loading(&entry, key).await;
        // Without coalescing every miss calls the origin, on every replica alike.
        let takes_lease = self.policy.coalesce() && self.policy.fleet_lease();
        let token = LeaseToken::of_replica(tier.remote.store().replica());
        let own_lease = self.policy.lease();
        let mut recompute = self.store.get_arc(key).map(|held| seconds(held.delta));
        let request = |recompute| {
            takes_lease.then(|| LeaseRequest {
                purpose,
                ttl: own_lease,
                token,
                quiet_after: Some(self.quiet_after(recompute)),
                held_after: Some(held_after.unwrap_or(own_lease).min(own_lease)),
                recompute,
            })
        };
        let read = |entry, recompute, watching| {
            let lease = request(recompute);
            let sent = crate::flight::tick();
            let found = tier.find(
                entry,
                lease,
                self.clock.now(),
                self.next_generation(),
                watching,
            );
            async move {
                let found = found.await;
                if let (Some(_), Some(flight)) = (&found.read, flight) {
                    flight.rests_on(sent);
                }
                found
            }
        };
        let mut found = read(entry, recompute, watching).await;
        if takes_lease && found.holder().is_some() {
            self.counters.leases_lost.bump();
        }
        let mut waiting_since = None;
        // A wait for another replica's load: one span, naming that replica.
        let mut waiting = tracing::Span::none();
        if purpose == LeaseFor::Miss && takes_lease {
            let (mut waited, mut rereads) = (false, 0);
            // The notice that ended the last wait, if one did.
            let mut noticed = None;
            // Listening to the key again while waiting, when the load's own went deaf.
            let mut relistened = None;
            loop {
                recompute = recompute
                    .max(found.envelope.as_ref().map(|stored| seconds(stored.delta)))
                    .max(found.holder().and_then(|holder| holder.recompute));
                if let Some(holder) = found.holder() {
                    if !waited {
                        // A batch stops waiting for this key: another replica loads it.
                        super::batch::parked();
                        self.counters.lease_waits.bump();
                        waiting_since = Some(self.clock.precise());
                        waiting = tracing::debug_span!(
                            target: "stampede",
                            "lease_wait",
                            cache = %self.policy.name(),
                            owner = tracing::field::Empty,
                        );
                        waited = true;
                    }
                    if let Some(owner) = holder.replica {
                        waiting.record(
                            "owner",
                            tracing::field::display(format_args!("{owner:08x}")),
                        );
                    }
                    let quiet = self.quiet_after(recompute);
                    // The bucket this load listened to may not be heard any more (the
                    // subscription came back, or its confirmation timed out): listen
                    // again, so the wait ends on the holder's notice, not its deadline.
                    if !tier.hears(&found.key) {
                        relistened = Some(tier.remote.store().listen(&found.key).await);
                    }
                    let wake = tier.watch(&found.key);
                    let read_fence = found.read.as_ref().map_or(0, |read| read.fence);
                    let Found { key, watching, .. } = found;
                    // The holder's publish brought its value: no read needed, unless the
                    // value cannot be served as it is (then the read decides).
                    let carried = noticed
                        .take()
                        .and_then(|notice| tier.read_in_notice(&notice, read_fence));
                    found = match carried {
                        Some(carried) => {
                            let (now, generation) = (self.clock.now(), self.next_generation());
                            let settled =
                                tier.settle(key, carried, None, now, generation, watching);
                            let settled = settled.await;
                            if settled.envelope.is_some() {
                                settled
                            } else {
                                let Found { key, watching, .. } = settled;
                                read(key, recompute, watching).await
                            }
                        }
                        None => {
                            read(key, recompute, watching)
                                .instrument(waiting.clone())
                                .await
                        }
                    };
                    if let Some(holder) = found.holder() {
                        // Until a notice, the holder goes quiet, or this wait is overdue.
                        let wait = (holder.remaining)
                            .min(quiet.saturating_sub(holder.silent_for))
                            .min(own_lease.saturating_sub(holder.held_for));
                        noticed = wait_for_notice(wake, tier.subscription(), wait.max(MIN_WAIT))
                            .instrument(waiting.clone())
                            .await;
                    }
                    continue;
                }
                if waited && found.took_over() {
                    self.counters.lease_takeovers.bump();
                }
                // The store found its value servable by the server's clock, so it granted
                // no lease; by this cache's clock, a moment later, the value has expired.
                // Loading now would be a load without the lease, next to the replica that
                // takes it a millisecond later: read again (the server's clock has passed
                // the deadline by then) and take the lease, or wait for its holder.
                let expired_unleased = matches!(
                    found.read.as_ref().map(|read| &read.lease),
                    Some(Lease::NotTaken)
                ) && found
                    .envelope
                    .as_ref()
                    .is_some_and(|stored| stored.state(self.clock.now()) == State::Expired);
                if expired_unleased && rereads < EXPIRED_REREADS {
                    rereads += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let Found { key, watching, .. } = found;
                    found = read(key, recompute, watching).await;
                    continue;
                }
                break;
            }
            // Heard no longer than the wait.
            drop(relistened);
        }
        if let Some(since) = waiting_since {
            let waited = self.clock.precise().saturating_duration_since(since);
            self.counters.lease_wait.record(waited);
        }
        if found.lease.is_some() {
            self.counters.leases_won.bump();
        }
        found.refresh = purpose != LeaseFor::Miss;
        let now = self.clock.now();
        let state = found.envelope.as_ref().map(|stored| stored.state(now));
        match (&found.read, purpose, state) {
            (None, _, _) => self.counters.backend_errors.bump(),
            // A refresh's callers were counted where they were served; a stale value a
            // miss finds is counted when it is served.
            (Some(_), LeaseFor::Refresh | LeaseFor::Force, _)
            | (Some(_), LeaseFor::Miss, Some(State::Stale)) => {}
            (Some(_), LeaseFor::Miss, Some(State::Fresh)) => self.counters.shared_hits.bump(),
            (Some(_), LeaseFor::Miss, _) => self.counters.shared_misses.bump(),
        }
        Some(found)
    }

    /// How long a lease's holder may go without a sign of life before this cache takes
    /// the lease over: twice the key's last recompute time plus [`QUIET_MARGIN`] (a holder
    /// that fast never beats, it publishes), between [`QUIET_FLOOR`] and three missed
    /// beats, and never longer than its own lease.
    pub(super) fn quiet_after(&self, recompute: Option<Duration>) -> Duration {
        let silent = recompute.map_or(QUIET_CEILING, |recompute| {
            (recompute * 2 + QUIET_MARGIN).clamp(QUIET_FLOOR, QUIET_CEILING)
        });
        silent.min(self.policy.lease())
    }

    /// Before a refresh of `current` reads the store: whether the replica holding the
    /// key's lease is left to refresh it for now (this replica served the stale value
    /// without asking), else how long that holder may have held the lease before this
    /// refresh takes it over whatever its signs of life.
    pub(super) fn left_to_holder(
        &self,
        key: &K,
        current: &Envelope<V>,
    ) -> Result<Option<Duration>, ()> {
        let (Some(tier), now) = (self.tier(), self.clock.now()) else {
            return Ok(None);
        };
        let Some(entry) = tier.address(key) else {
            return Ok(None);
        };
        match tier.held_elsewhere(&entry, current.stale_until) {
            Some((until, _)) if now < until => Err(()),
            Some((_, held_after)) => Ok(Some(held_after)),
            None => Ok(None),
        }
    }

    /// A refresh found the lease held by `holder`: this replica leaves the refresh to it
    /// until it goes quiet or, whatever its signs of life, until a refresh of this
    /// replica's could only just finish before the value being refreshed (`current`, or
    /// the store's own if that stays servable longer) stops being servable: the stale
    /// window is never turned into misses by a lease held elsewhere, whatever the lease's
    /// length. Never before the holder has had its recompute time, though: a holder on
    /// its way finishes sooner than a new refresh.
    pub(super) fn leave_refresh(&self, found: &Found<K, V>, holder: Holder, current: &Envelope<V>) {
        let Some(tier) = self.tier() else { return };
        let now = self.clock.now();
        let recompute = Some(seconds(current.delta)).max(holder.recompute);
        let until_quiet = self
            .quiet_after(recompute)
            .saturating_sub(holder.silent_for);
        // An older memory copy ends before the store's value: once it does, a call reads
        // the store's, still servable, so the fleet's window is the store's.
        let servable_until = (found.envelope.as_ref()).map_or(current.stale_until, |stored| {
            stored.stale_until.max(current.stale_until)
        });
        let last_start = servable_until
            .saturating_duration_since(now)
            .saturating_sub(recompute.unwrap_or_default() * 2 + QUIET_MARGIN);
        // A holder within its recompute time is on its way: taking its lease over then
        // would only load the key twice (its publish refused), and finish no sooner.
        let due = recompute.unwrap_or_default() + QUIET_MARGIN;
        let wait = until_quiet
            .min(last_start)
            .max(due.saturating_sub(holder.held_for));
        let held_after = (holder.held_for + last_start).max(due);
        tier.leave_to_holder(&found.key, current.stale_until, now + wait, held_after);
    }

    /// Publishes a new value to the shared store (a fallback stays local), and returns
    /// what memory keeps of it (see [`Inner::memory_copy`]) and whether the store took
    /// it. A refused publish is counted (`publish_refused`).
    pub(super) async fn write_remote(
        &self,
        key: &K,
        mut found: Option<&mut Found<K, V>>,
        envelope: Envelope<V>,
    ) -> (Option<Envelope<V>>, bool) {
        let (standing, taken) = match (self.tier(), found.as_deref_mut()) {
            (Some(tier), Some(found)) if !envelope.rearmed() => {
                let (leased, refresh) = (found.lease.is_some(), found.refresh);
                // The deadlines go out as time from the moment the store's clock is
                // estimated at: now, not when the value was judged, which may be a tag
                // read ago; counted from then, the store would keep the value that much
                // longer than the policy says.
                match tier.publish(found, &envelope, self.clock.now()).await {
                    Wrote::Stored => (Standing::Stored, true),
                    Wrote::Refused => {
                        self.counters.publish_refused.bump();
                        if leased {
                            self.counters.leases_expired.bump();
                        }
                        if refresh {
                            self.counters.refreshes_refused.bump();
                        }
                        return (None, false);
                    }
                    Wrote::Unconfirmed => (Standing::Unheard, false),
                    Wrote::TooLarge => (Standing::Own, false),
                }
            }
            // Nothing published: a fallback re-armed here, or no store to publish to.
            _ => (Standing::Stored, false),
        };
        (
            self.memory_copy(key, found.as_deref(), envelope, standing),
            taken,
        )
    }
}

/// Until a notice for the key, or for at most `wait`. A subscription that is down (not up
/// yet at start-up, or dropped) cannot bring the notice: the waiter waits for it to come
/// up instead, then reads again at once.
async fn wait_for_notice(
    wake: tokio::sync::oneshot::Receiver<Wake>,
    mut subscription: tokio::sync::watch::Receiver<bool>,
    wait: Duration,
) -> Option<Notice> {
    let woken = async {
        match wake.await {
            Ok(Wake::Notice(notice)) => Some(notice),
            Ok(Wake::SubscriptionLost) | Err(_) => {
                let _ = subscription.wait_for(|up| *up).await;
                None
            }
        }
    };
    tokio::time::timeout(wait, woken).await.ok().flatten()
}

/// How often a miss reads again when the store's value expired between the store's clock
/// and this cache's: a few milliseconds of disagreement at most.
const EXPIRED_REREADS: u32 = 3;

/// The shortest wait between two reads of a key whose lease another replica holds.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// Beyond twice its recompute time, how long a lease's holder may take to publish (two
/// Redis round trips and a busy moment) before a waiter takes the lease over.
const QUIET_MARGIN: Duration = Duration::from_millis(100);

/// The least silence a waiter takes for a holder gone quiet, whatever the recompute time:
/// two beats.
const QUIET_FLOOR: Duration = Duration::from_millis(200);

/// The most: three beats missed.
const QUIET_CEILING: Duration = Duration::from_millis(300);

/// A recompute time (XFetch's δ, in seconds) as a duration.
fn seconds(delta: f64) -> Duration {
    Duration::try_from_secs_f64(delta).unwrap_or_default()
}

/// What the shared store said before the origin.
// One per load, moved once and never stored: boxing `Load` would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Ahead<K, V, E> {
    /// Answered without calling the origin.
    Answered(Result<V, E>),
    /// Call the origin, and publish under `found`'s read (and lease). `stand_in`: a value
    /// from the store, the answer if the load ends without one of its own.
    Load {
        found: Option<Found<K, V>>,
        stand_in: Option<Envelope<V>>,
    },
}
