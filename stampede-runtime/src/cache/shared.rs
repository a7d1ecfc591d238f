//! A cache's steps on the shared store: connecting on first use, reading before the
//! origin (taking the key's lease, or waiting for the replica that holds it, in
//! `lease_wait.rs`) and the decision that read comes to, which the load's steps act on,
//! and publishing under the lease's fence (what memory keeps is `copies.rs`).
use super::copies::Standing;
use super::lease_wait::LeaseWait;
use super::load::{outcome, Purpose};
use super::tagging::{ValueFrom, Written};
use super::{notices, Inner, LoadLeader};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::{Envelope, State};
use crate::policy::Consistency;
use crate::shared::keys::EntryKey;
use crate::shared::store::{Holder, Lease, LeaseFor, LeaseRequest, LeaseToken};
use crate::shared::tier::{Found, Loading, Tier, Wrote};
use std::sync::Arc;
use std::time::Duration;

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// This cache's side of the shared store if it is connected already.
    pub(super) fn connected_tier(&self) -> Option<&Arc<Tier<K, V>>> {
        self.shared.as_ref()?.tier.get()?.as_ref()
    }

    /// This cache's side of the shared store, connected on first use inside a Tokio
    /// runtime; `None` for the memory backend and `local` caches. The notice listener
    /// subscribes here, before the first read.
    pub(super) fn tier(&self) -> Option<&Arc<Tier<K, V>>> {
        let side = self.shared.as_ref()?;
        if let Some(tier) = side.tier.get() {
            return tier.as_ref();
        }
        // Outside Tokio the store cannot run: memory only, until a load inside one.
        tokio::runtime::Handle::try_current().ok()?;
        let tier = side.tier.get_or_init(|| {
            let replica = side.runtime.replica()?.clone();
            let events = replica.store().events();
            let tier = Arc::new(Tier::new(
                replica,
                side.codec,
                self.policy.name().clone(),
                self.policy.version(),
                side.keeps_memory,
                self.policy.capacity(),
                crate::memory::lifetime(&self.policy, self.clock.is_real_time()),
            ));
            self.memory.hear_under(tier.replica.store().hearing_lease());
            // On the background threads, so it outlives the runtime that first connected.
            crate::shared::background::spawn(notices::follow(self.me.clone(), events));
            Some(tier)
        });
        tier.as_ref()
    }

    /// Step 3 of a load, the shared store's part before the origin: what to do, decided
    /// from what the store holds (see [`Decision`]); the steps act on it. A fresh value
    /// another replica stored answers without an origin call. A stale value in the store
    /// answers a detached miss's callers at once and is refreshed through the lease; so
    /// is a fresh one XFetch draws early, on a backend that keeps no memory copy to draw
    /// on. `flight` learns which of the reads its answer rests on (see
    /// [`Inner::find_shared`]); nothing here settles it.
    pub(super) async fn read_shared(
        &self,
        key: &K,
        flight: Option<&LoadLeader<K, V, E>>,
        purpose: Purpose<V>,
    ) -> Decision<K, V> {
        let detached = match purpose {
            Purpose::Force => {
                let found = self.find_shared(key, LeaseFor::Force, None, flight).await;
                return Decision::load(found, None);
            }
            Purpose::Refresh(refresh) => return self.read_refresh(key, flight, *refresh).await,
            Purpose::Miss { detached } => detached,
        };
        let mut found = self.find_shared(key, LeaseFor::Miss, None, flight).await;
        let now = self.clock.now();
        let servable = (found.as_mut()).and_then(|found| {
            found
                .envelope
                .take_if(|stored| stored.state(now) != State::Expired)
        });
        let Some(stored) = servable else {
            return Decision::load(found, None);
        };
        let fresh = stored.state(now) == State::Fresh;
        let early = fresh && self.draws_early_from_store(&stored, now);
        if fresh {
            outcome("shared");
            if !early {
                return Decision::Answer(self.stored_answer(key, found, stored));
            }
            self.counters.early_refreshes.bump();
        } else {
            // Stale in the store: its callers get it at once when they need not wait for
            // this task (detached).
            self.count_stale(&stored, now);
        }
        // Answered first: a fresh value XFetch drew early, or a stale one for callers
        // that need not wait (detached). Otherwise this read (and a lease the server's
        // clock had it take) is let go first, as after an answer.
        let first = if fresh || detached {
            Some(self.stored_answer(key, found, stored.clone()))
        } else {
            drop(found);
            None
        };
        let refresh = Refresh {
            current: stored,
            early,
            from_store: true,
        };
        match first {
            Some(first) => Decision::Refresh {
                first: Some(first),
                refresh,
            },
            None => self.read_refresh(key, flight, refresh).await,
        }
    }

    /// Step 3 of a refresh of `refresh.current`: one refresh for the fleet, through the
    /// lease. Another replica on it already: the current value answers.
    pub(super) async fn read_refresh(
        &self,
        key: &K,
        flight: Option<&LoadLeader<K, V, E>>,
        refresh: Refresh<V>,
    ) -> Decision<K, V> {
        let Refresh {
            current,
            early,
            from_store,
        } = refresh;
        let refreshing_elsewhere = |current: Envelope<V>, found| {
            outcome("refreshing elsewhere");
            Decision::Answer(Answer {
                value: current.value,
                copy: None,
                found,
            })
        };
        let Ok(quiet) = self.left_to_holder(key, &current) else {
            return refreshing_elsewhere(current, None);
        };
        let mut found = self
            .find_shared(key, LeaseFor::Refresh, quiet, flight)
            .await;
        if let Some((held, holder)) = found.as_ref().and_then(|f| Some((f, f.holder()?))) {
            self.leave_refresh(held, holder, &current);
            return refreshing_elsewhere(current, found);
        }
        // Past its freshness, any fresh value in the store is newer: another replica
        // refreshed it already. (Before it, an XFetch refresh cannot tell its own value
        // there from a newer one, and refreshes.)
        if !early && let Some(newer) = self.fresh_in(&mut found) {
            outcome("shared");
            return Decision::Answer(self.stored_answer(key, found, newer));
        }
        // A value found in the store answers the miss if its refresh fails.
        Decision::load(found, from_store.then_some(current))
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

    /// The answer a value read from the store gives (no origin call), and the copy
    /// memory keeps of it.
    fn stored_answer(
        &self,
        key: &K,
        found: Option<Found<K, V>>,
        stored: Envelope<V>,
    ) -> Answer<K, V> {
        let copy = self.memory_copy(key, found.as_ref(), stored.clone(), Standing::Stored);
        Answer {
            value: stored.value,
            copy,
            found,
        }
    }

    /// What the shared store holds for `key`, counted, with the key's lease when `purpose`
    /// asks for it and nobody holds it. The load is registered with the tier from before
    /// the first read until `Found` is dropped, so a notice from another replica that
    /// outdates it detaches it, even one that arrives while the read is on its way.
    ///
    /// A miss whose lease another replica holds waits for that replica (a [`LeaseWait`]).
    /// A refresh never waits: `held_after` says when it may take a live holder's lease
    /// over (the stale window ending). An uncoalesced cache takes no lease.
    ///
    /// Each read the store answers is one `flight`'s answer may rest on: the flight learns
    /// when it was sent, so a caller that joins it after that loads again (see
    /// [`Leader::rests_on`](crate::flight::Leader::rests_on)).
    ///
    /// Longer than a screen: one loop over the store's reads (a read, a wait for the holder, a
    /// read again), whose variables are what the loop carries from one read to the next.
    pub(super) async fn find_shared(
        &self,
        key: &K,
        purpose: LeaseFor,
        held_after: Option<Duration>,
        flight: Option<&LoadLeader<K, V, E>>,
    ) -> Option<Found<K, V>> {
        let tier = self.tier()?;
        let entry = tier.address(key)?;
        let watching = tier.loading(&entry, key).await;
        // A load deaf to its key (no subscription, or its bucket not confirmed in time) is
        // detached by no notice. In a cache whose writes are acknowledged it is fenced
        // here, as a notice would: a caller that comes later does not join it (as while
        // the hearing lease does not hold) and memory keeps nothing it loads. The lease
        // may hold while this key's bucket is not heard, so a write elsewhere may return
        // (answered by this replica) before this load's value is retired (seed 50032959:
        // a load begun while Redis was slow was joined after a write elsewhere returned,
        // and answered the retired value).
        if watching.since() == 0 && self.policy.consistency() == Consistency::Acknowledged {
            self.flights.invalidate(key);
        }
        // Without coalescing every miss calls the origin, on every replica alike.
        let takes_lease = self.policy.coalesce() && self.policy.fleet_lease();
        let reads = Reads {
            inner: self,
            tier,
            purpose,
            held_after,
            takes_lease,
            token: LeaseToken::of_replica(tier.replica.store().replica()),
            flight,
        };
        let mut recompute = self.memory.get_arc(key).map(|held| seconds(held.delta));
        let mut found = reads.read(entry, recompute, watching).await;
        if takes_lease && found.holder().is_some() {
            self.counters.leases_lost.bump();
        }
        if purpose == LeaseFor::Miss && takes_lease {
            let (mut wait, mut rereads) = (None, 0);
            loop {
                recompute = recompute
                    .max(found.envelope.as_ref().map(|stored| seconds(stored.delta)))
                    .max(found.holder().and_then(|holder| holder.recompute));
                if let Some(holder) = found.holder() {
                    let wait = wait.get_or_insert_with(|| LeaseWait::begin(self));
                    found = wait.round(&reads, found, holder, recompute).await;
                    continue;
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
                    found = reads.read(key, recompute, watching).await;
                    continue;
                }
                break;
            }
            if let Some(wait) = wait {
                wait.end(self);
            }
        }
        if found.lease.is_some() {
            self.counters.leases_won.bump();
        }
        // Each lease taken from another holder is one more origin call for its key: after
        // a wait, or at the first read (a holder silent already, as on a starved machine,
        // or a refresh near the end of the stale window).
        if found.took_over() {
            self.counters.lease_takeovers.bump();
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

    /// Step 6 before memory, one future (boxed by the load, which would otherwise carry
    /// both): the versions of the entry's tags checked and stamped (see [`Inner::began`]),
    /// then the value published to the shared store under its fence.
    pub(super) async fn publish(
        &self,
        key: &K,
        found: Option<&mut Found<K, V>>,
        envelope: Envelope<V>,
        (began, asked): (u64, Instant),
        from: ValueFrom,
        flight: Option<&LoadLeader<K, V, E>>,
    ) -> Written<V> {
        // Before the tags are checked and the value goes out: a publish the store takes
        // under the fence of the read that granted the lease shows that no invalidation
        // came between them, so a caller that joined the flight before this shares the
        // answer.
        let flight =
            (flight.filter(|_| self.shared.is_some())).map(|flight| (flight, self.flights.tick()));
        let envelope = if self.tags.of.is_some() {
            let began = self.began(found.as_deref(), (began, asked), from);
            // The store could not be read: a copy is kept only for the degraded bound.
            let degraded = found.as_deref().is_some_and(|found| found.read.is_none());
            match self.stamp(key, envelope, began, degraded).await {
                Some(envelope) => envelope,
                None => return Written::TagMoved,
            }
        } else {
            envelope
        };
        if self.shared.is_none() {
            return Written::Kept(Some(envelope));
        }
        let (copy, taken) = self.write_shared(key, found, envelope).await;
        if let (true, Some((flight, sent))) = (taken, flight) {
            flight.rests_on(sent);
        }
        Written::Kept(copy)
    }

    /// Publishes a new value to the shared store (a fallback stays local), and returns
    /// what memory keeps of it (see [`Inner::memory_copy`]) and whether the store took
    /// it. A refused publish is counted (`publish_refused`).
    pub(super) async fn write_shared(
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

/// How often a miss reads again when the store's value expired between the store's clock
/// and this cache's: a few milliseconds of disagreement at most.
const EXPIRED_REREADS: u32 = 3;

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

/// What step 3 decided from the shared store; the steps act on it, and alone settle the
/// flight.
// One per load, moved once and never stored: boxing `Answer` would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Decision<K, V> {
    /// Every caller's answer, without an origin call.
    Answer(Answer<K, V>),
    /// Refresh `refresh.current` for the fleet ([`Inner::read_refresh`]), once `first`
    /// has answered every caller, if there is one.
    Refresh {
        first: Option<Answer<K, V>>,
        refresh: Refresh<V>,
    },
    /// Call the origin, and publish under `found`'s read (and lease). `stand_in`: a value
    /// from the store, the answer if the load ends without one of its own. Boxed: the
    /// steps hold them through the origin call, in every load's future.
    Load {
        found: Option<Box<Found<K, V>>>,
        stand_in: Option<Box<Envelope<V>>>,
    },
}

impl<K, V> Decision<K, V> {
    fn load(found: Option<Found<K, V>>, stand_in: Option<Envelope<V>>) -> Self {
        Decision::Load {
            found: found.map(Box::new),
            stand_in: stand_in.map(Box::new),
        }
    }
}

/// A value that answers every caller without an origin call; memory keeps `copy`.
/// `found` (the read, and the load's registration for notices) is held until the flight
/// is settled, so a notice meanwhile still fences the copy out; a lease the read took
/// goes back when it is dropped.
pub(super) struct Answer<K, V> {
    pub(super) value: V,
    pub(super) copy: Option<Envelope<V>>,
    pub(super) found: Option<Found<K, V>>,
}

/// A value to refresh through the lease, and what it is to the load.
pub(super) struct Refresh<V> {
    pub(super) current: Envelope<V>,
    /// XFetch drew it early: a fresh value in the store may be this one.
    pub(super) early: bool,
    /// Read from the store by this load: the answer if the refresh fails.
    pub(super) from_store: bool,
}

/// One load's reads of its key in the shared store: the lease each asks for, and the
/// flight that learns which read its answer rests on.
pub(super) struct Reads<'a, K: CacheKey, V: LocalValue, E: CacheError> {
    pub(super) inner: &'a Inner<K, V, E>,
    pub(super) tier: &'a Tier<K, V>,
    purpose: LeaseFor,
    held_after: Option<Duration>,
    takes_lease: bool,
    token: LeaseToken,
    flight: Option<&'a LoadLeader<K, V, E>>,
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Reads<'_, K, V, E> {
    /// Reads `entry` for the load `watching` registered, asking for its lease when this
    /// load takes one. `recompute`: the key's last recompute time, which sets how long a
    /// silent holder is deferred to.
    pub(super) async fn read(
        &self,
        entry: EntryKey,
        recompute: Option<Duration>,
        watching: Loading<K, V>,
    ) -> Found<K, V> {
        let inner = self.inner;
        let own_lease = inner.policy.lease();
        let lease = self.takes_lease.then(|| LeaseRequest {
            purpose: self.purpose,
            ttl: own_lease,
            token: self.token,
            quiet_after: Some(inner.quiet_after(recompute)),
            held_after: Some(self.held_after.unwrap_or(own_lease).min(own_lease)),
            recompute,
        });
        // Before the read is sent: a caller that joins the flight after this is not
        // answered by what this read finds.
        let sent = inner.flights.tick();
        let (now, generation) = (inner.clock.now(), inner.next_generation());
        let found = (self.tier)
            .find(entry, lease, now, generation, watching)
            .await;
        if let (Some(_), Some(flight)) = (&found.read, self.flight) {
            flight.rests_on(sent);
        }
        found
    }
}
