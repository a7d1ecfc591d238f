//! The leader's pipeline, the one place that knows the order of its steps:
//!
//! ```text
//! the shared store (redis, tiered), taking the key's lease when nothing servable is there
//!   -> fresh there? answer with it
//!   -> stale there? answer with it (detached), refresh through the lease
//!   -> lease held by another replica? wait for its notice (bounded by the lease), read again
//! -> admission permit -> origin -> the shared store, under the lease's fence
//! -> memory -> wake the waiters
//! ```
//! A refresh takes the lease without waiting: when another replica holds it, the value
//! being refreshed stays the answer.
use super::leader::{within_leader, Called, Purpose};
use super::remote::Standing;
use super::*;
use crate::remote::store::LeaseFor;

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// The leader's part of a load, in one tracing span: an admission permit, the origin,
    /// publishing. Shared by both leader modes, so both queue and shed alike.
    pub(super) async fn lead<F, Fut>(
        &self,
        key: K,
        leader: SharedLeader<K, V, E>,
        origin: F,
        purpose: Purpose<V>,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Called<V, E>>,
    {
        let span = tracing::debug_span!(
            target: "stampede",
            "origin_load",
            cache = %self.policy.name(),
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let load = async {
            let asked = self.clock.precise();
            let flight = leader.flight_id();
            let mut leader = Some(leader);
            let (found, stand_in) = match self.consult_shared(&key, &mut leader, purpose).await {
                Ahead::Answered(answer) => return answer,
                Ahead::Load { found, stand_in } => (found, stand_in),
            };
            let (shared, outcome) = match self.admit().await {
                Ok(permit) => {
                    self.counters.origin_calls.bump();
                    let started = self.clock.precise();
                    let called = {
                        let _panics = CountPanic(&self.counters.refresh_errors);
                        within_leader(flight, origin()).await
                    };
                    drop(permit);
                    let delta = self.clock.precise().saturating_duration_since(started);
                    let (result, panicked) = match called {
                        Called::Returned(result) => (result, false),
                        Called::Panicked => (
                            Err(self.fail(Error::OriginPanicked {
                                cache: self.policy.name().clone(),
                            })),
                            true,
                        ),
                    };
                    let (shared, outcome) = self
                        .publish(key, leader, result, delta.as_secs_f64(), found, stand_in)
                        .await;
                    (shared, if panicked { "panicked" } else { outcome })
                }
                Err(refusal) => match self.servable(stand_in) {
                    // A refresh that may not run leaves the value it would replace.
                    Some(stale) => (self.settle(leader, Ok(stale), None), "shed_stale"),
                    None => self.refuse(key, leader, refusal),
                },
            };
            let span = tracing::Span::current();
            span.record("outcome", outcome);
            let elapsed = self.clock.precise().saturating_duration_since(asked);
            span.record("duration_ms", elapsed.as_secs_f64() * 1e3);
            shared
        };
        load.instrument(span).await
    }

    /// The shared store's part before the origin: the key's lease, or an answer without
    /// an origin call (a fresh value another replica stored; the value a refresh would
    /// replace while another replica refreshes it). A stale value in the store answers a
    /// detached miss's callers at once (`leader` is then taken and settled) and is
    /// refreshed through the lease; so is a fresh one XFetch draws early, on a backend
    /// that keeps no memory copy to draw on.
    async fn consult_shared(
        &self,
        key: &K,
        leader: &mut Option<SharedLeader<K, V, E>>,
        purpose: Purpose<V>,
    ) -> Ahead<K, V, E> {
        let (current, early, from_store) = match purpose {
            Purpose::Refresh { current, early } => (current, early, false),
            Purpose::Miss { detached } => {
                let mut found = self.find_shared(key, LeaseFor::Miss, None).await;
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
                        self.take_shared(key, leader.take(), found.as_ref(), stored.clone());
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
                            self.memory_copy(key, found.as_ref(), stored.clone(), Standing::Shared);
                        // Answered: the waiters have their value.
                        let _ = self.settle(leader.take(), value, copy);
                    }
                    false
                };
                (stored, early, true)
            }
        };
        // One refresh for the fleet, through the lease.
        let refreshing_elsewhere = |leader: &mut Option<SharedLeader<K, V, E>>,
                                    current: Envelope<V>| {
            tracing::Span::current().record("outcome", "refreshing elsewhere");
            Ahead::Answered(self.settle(leader.take(), Ok(current.value), None))
        };
        let Ok(quiet) = self.left_to_holder(key) else {
            return refreshing_elsewhere(leader, current);
        };
        let mut found = self.find_shared(key, LeaseFor::Refresh, quiet).await;
        if let Some((found, holder)) = found.as_ref().and_then(|f| Some((f, f.holder()?))) {
            self.leave_refresh(found, holder, &current);
            return refreshing_elsewhere(leader, current);
        }
        // Past its freshness, any fresh value in the store is newer: another replica
        // refreshed it already. (Before it, an XFetch refresh cannot tell its own value
        // there from a newer one, and refreshes.)
        if !early {
            if let Some(newer) = self.fresh_in(&mut found) {
                let answer = self.take_shared(key, leader.take(), found.as_ref(), newer);
                return Ahead::Answered(answer);
            }
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

    /// A permit of the cache's admission semaphore (none needed without one), or the error
    /// that stops this load: `Overloaded` past the queue timeout, or a closed gate's.
    pub(super) async fn admit(&self) -> Result<Option<OwnedSemaphorePermit>, Error> {
        let admission = match &self.gate {
            Gate::Open => return Ok(None),
            Gate::Closed(error) => return Err(error.clone()),
            Gate::Limited(admission) => admission,
        };
        let asked = self.clock.precise();
        let permit = admission.enter().await;
        let waited = self.clock.precise().saturating_duration_since(asked);
        self.counters.admission_wait.record(waited);
        match permit {
            Some(permit) => {
                self.counters.admitted.bump();
                Ok(Some(permit))
            }
            None => Err(Error::Overloaded {
                cache: self.policy.name().clone(),
                admission: admission.name().clone(),
                waited,
            }),
        }
    }

    /// Answers a load that may not call the origin, and settles its flight with that
    /// answer so every waiter gets it too. A shed load is answered by the value it would
    /// have replaced when the policy lets that be served: as is inside its fresh or stale
    /// window, re-armed like a failed load's fallback under `stale_if_error`. Otherwise,
    /// and for a broken configuration, the error.
    pub(super) fn refuse(
        &self,
        key: K,
        leader: Option<SharedLeader<K, V, E>>,
        refusal: Error,
    ) -> (Result<V, E>, &'static str) {
        let now = self.clock.now();
        let shed = matches!(refusal, Error::Overloaded { .. });
        let stand_in = if shed {
            self.counters.shed.bump();
            // keep_until is stale_until, or later only under stale_if_error.
            self.store.get(&key).filter(|last| now < last.keep_until)
        } else {
            None
        };
        let Some(last) = stand_in else {
            let outcome = if shed { "shed" } else { "refused" };
            return (self.settle(leader, Err(self.fail(refusal)), None), outcome);
        };
        let rearmed = match last.state(now) {
            State::Fresh => None,
            State::Stale => {
                self.counters.oldest_stale_served.record(last.age(now));
                None
            }
            State::Expired => Some(self.fall_back(&last, now, self.next_generation())),
        };
        let value = Ok(last.value);
        (self.settle(leader, value, rearmed), "shed_stale")
    }

    /// The last value standing in for a load that could not give a new one (the origin
    /// failed, or the load was shed), re-armed for one throttle so the origin is retried
    /// once per throttle, not on every request.
    pub(super) fn fall_back(
        &self,
        last: &Envelope<V>,
        now: Instant,
        generation: u64,
    ) -> Envelope<V> {
        self.counters.fallbacks.bump();
        self.counters.oldest_stale_served.record(last.age(now));
        let mut rearmed = last.rearm(now, self.policy.fail_safe_throttle());
        rearmed.generation = generation;
        rearmed
    }

    /// Stores a success (in the shared store under the fence its read returned, then in
    /// memory), or re-arms the last value when the fail-safe allows, then hands the
    /// outcome to the flight's waiters. Errors are never stored.
    /// `stand_in` (a stale value from the shared store) answers a failed load while it
    /// may still be served.
    pub(super) async fn publish(
        &self,
        key: K,
        leader: Option<SharedLeader<K, V, E>>,
        result: Result<V, E>,
        delta: f64,
        mut found: Option<Found<K, V>>,
        stand_in: Option<Envelope<V>>,
    ) -> (Result<V, E>, &'static str) {
        let now = self.clock.now();
        let generation = self.next_generation();
        let (shared, envelope, outcome) = match result {
            // Answered, but neither memory nor the shared store keeps it (`cache_if`).
            Ok(value) if !self.policy.caches(&value) => (Ok(value), None, "not cached"),
            Ok(value) => {
                let mut envelope = Envelope::fill(
                    value.clone(),
                    now,
                    &self.policy,
                    delta,
                    generation,
                    fastrand::f64(),
                );
                envelope.source_version = self.source_version.map(|version| version(&value));
                (Ok(value), Some(envelope), "loaded")
            }
            Err(error) => {
                self.counters.refresh_errors.bump();
                let last = (self.fallback(&key, now))
                    .or_else(|| self.shared_fallback(found.as_mut(), now));
                match (last, self.servable(stand_in)) {
                    (Some(last), _) => {
                        let rearmed = self.fall_back(&last, now, generation);
                        (Ok(last.value), Some(rearmed), "fallback")
                    }
                    // A failed refresh leaves the value it would have replaced.
                    (None, Some(current)) => (Ok(current), None, "stale"),
                    (None, None) => (Err(error), None, "failed"),
                }
            }
        };
        let envelope = match envelope {
            Some(envelope) => self.write_shared(&key, found.as_mut(), envelope, now).await,
            None => None,
        };
        let kept = match (&shared, &self.known_errors) {
            (Err(error), Some(_)) if self.policy.keeps_error(error) => self.policy.error_ttl(),
            _ => None,
        };
        let Some(ttl) = kept else {
            return (self.settle(leader, shared, envelope), outcome);
        };
        // Negative caching: the error is stored under the flight's fences, as a value is.
        // Without a leader its callers were answered already, and nothing is kept.
        let Some(leader) = leader else {
            return (shared, "failed");
        };
        let until = now + ttl;
        let store = |key| {
            if let (Some(known), Err(error)) = (&self.known_errors, &shared) {
                known.insert(key, error.clone(), until);
            }
        };
        leader.settle(shared.clone(), store);
        (shared, "failed, kept")
    }

    /// Stores `envelope` (unless an invalidation fenced the load out meanwhile) and hands
    /// `shared` to the flight's waiters.
    /// Without a leader (its callers were answered before the load ended) memory keeps
    /// nothing: only the flight's fence tells whether an invalidation passed meanwhile.
    pub(super) fn settle(
        &self,
        leader: Option<SharedLeader<K, V, E>>,
        shared: Result<V, E>,
        envelope: Option<Envelope<V>>,
    ) -> Result<V, E> {
        let Some(leader) = leader else {
            return shared;
        };
        let store = |key: K| {
            let Some(envelope) = envelope else { return };
            if self.below_mark(&key, &envelope) || self.older_than_held(&key, &envelope) {
                return;
            }
            // A value supersedes an error negative caching kept for its key.
            self.forget_error(&key);
            self.store.insert(key, envelope);
        };
        leader.settle(shared.clone(), store);
        shared
    }

    /// Whether memory holds a value of `key` read at a newer source version than
    /// `envelope`'s: two loads that crossed, the older one finishing last.
    fn older_than_held(&self, key: &K, envelope: &Envelope<V>) -> bool {
        let Some(version) = envelope.source_version else {
            return false;
        };
        (self.store.get_shared(key))
            .and_then(|held| held.source_version)
            .is_some_and(|held| held > version)
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
    fn take_shared(
        &self,
        key: &K,
        leader: Option<SharedLeader<K, V, E>>,
        found: Option<&Found<K, V>>,
        stored: Envelope<V>,
    ) -> Result<V, E> {
        let value = Ok(stored.value.clone());
        let copy = self.memory_copy(key, found, stored, Standing::Shared);
        tracing::Span::current().record("outcome", "shared");
        self.settle(leader, value, copy)
    }

    /// The value of `stale` if it may still be served now.
    fn servable(&self, stale: Option<Envelope<V>>) -> Option<V> {
        let now = self.clock.now();
        stale
            .filter(|stale| stale.state(now) != State::Expired)
            .map(|stale| stale.value)
    }

    /// The last value, when `stale_if_error` lets it stand in for a failing origin.
    pub(super) fn fallback(&self, key: &K, now: Instant) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        self.store.get(key).filter(|last| now < last.keep_until)
    }

    /// Bounds a miss by the policy's deadline. A caller whose deadline passes gets the
    /// fail-safe value if there is one, else [`Error::Timeout`]; in detached mode the load
    /// goes on without it.
    pub(super) fn within_deadline<'a, M>(
        &'a self,
        key: &'a K,
        miss: M,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        M: Future<Output = Result<V, E>> + 'a,
    {
        // Combinators, not an `async fn`: an async fn would hold `miss` twice (as its
        // argument and inside the timeout), doubling what every waiting caller carries.
        match self.policy.timeout() {
            Some(limit) => Either::Right(
                deadline::within(limit, miss)
                    .map(move |answer| answer.unwrap_or_else(|| self.past_deadline(key, limit))),
            ),
            None => Either::Left(miss),
        }
    }

    /// A caller's deadline passed: the fail-safe value if there is one, else a timeout.
    pub(super) fn past_deadline(&self, key: &K, limit: Duration) -> Result<V, E> {
        self.counters.timeouts.bump();
        let now = self.clock.now();
        match self.fallback(key, now) {
            Some(last) => {
                self.count_stale(&last, now);
                Ok(last.value.clone())
            }
            None => Err(self.fail(Error::Timeout {
                cache: self.policy.name().clone(),
                after: limit,
            })),
        }
    }
}

/// What the shared store said before the origin.
// One per load, moved once and never stored: boxing `Load` would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Ahead<K, V, E> {
    /// Answered without calling the origin.
    Answered(Result<V, E>),
    /// Call the origin, and publish under `found`'s read (and lease). `stand_in`: a value
    /// from the store, the answer if the load ends without one of its own.
    Load {
        found: Option<Found<K, V>>,
        stand_in: Option<Envelope<V>>,
    },
}

/// Counts an origin that unwinds through an inline load as a refresh error (a detached
/// load catches the panic and counts it where it publishes).
struct CountPanic<'a>(&'a crate::stats::Counter);

impl Drop for CountPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.bump();
        }
    }
}
