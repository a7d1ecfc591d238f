//! A load, and the one place that knows the order of its steps:
//!
//! ```text
//! what the lookup found -> fresh, and XFetch drew an early refresh: refresh, answer it
//!                       -> stale: refresh, answer it
//!                       -> expired or absent: a miss, within the caller's deadline
//!  1. join     the key's flight: a waiter gets the leader's answer, or takes over
//!  2. memory   a fresh value another flight stored since this caller looked answers it
//!     -- the leader's steps, run by its leader mode (leader.rs) --
//!  3. shared   the shared store decides (shared.rs): a fresh value there answers; a
//!              stale one answers a detached miss's callers at once and is refreshed
//!              (3b: the lease, unless another replica refreshes it); else the lease
//!  4. admit    an admission permit, or the load is shed
//!  5. origin   called inside the flight, timed
//!  6. publish  to the shared store under the lease's fence, then memory's copy
//!  7. settle   memory under the flight's fences, then every waiter woken
//! ```
//! Step 3 only decides; the steps act on its decision, and they alone settle the flight,
//! so who answers the callers is read here: step 2 or 3 (a value found), 3b (answered
//! early, the load goes on without waiters), 4 (shed), or 7.
//! A refresh takes steps 1 and 2 without waiting (someone else on it: nothing to do), and
//! its step 3 takes the lease without waiting: when another replica holds it, the value
//! being refreshed stays the answer. `Cache::refresh` (write.rs) fences the key and runs
//! steps 3 to 7 whatever memory and the store hold.
use super::leader::{leads, within_leader, Called, CountPanic, Runner};
use super::shared::{Answer, Decision, Refresh};
use super::tagging::{ValueFrom, Written};
use super::{Cache, Inner, LoadLeader, Unanswered};
use crate::admission::{Gate, Permit, Shed};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::deadline::within;
use crate::envelope::{Envelope, State};
use crate::error::Error;
use crate::flight::{Join, Outcome};
use crate::policy::{Consistency, Priority};
use crate::shared::tier::Found;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use tracing::Instrument;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Everything a call does after a lookup that found no plain fresh hit, in leader
    /// mode `R`.
    pub(crate) async fn load_found<R, F, Fut>(
        &self,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> Result<V, E>
    where
        R: Runner<K, V, E, F>,
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        let Unanswered {
            current,
            now,
            early,
        } = found;
        let seen = match current {
            Some(current) => match current.state(now) {
                State::Fresh => {
                    inner.count_hit(&key, &current, now);
                    if !early {
                        return Ok(current.value.clone());
                    }
                    return Box::pin(inner.refresh::<R, _, _>(key, &current, origin, true)).await;
                }
                State::Stale => {
                    inner.count_stale(&current, now);
                    return Box::pin(inner.refresh::<R, _, _>(key, &current, origin, false)).await;
                }
                State::Expired => Some(current.generation),
            },
            None => None,
        };
        if !inner.policy.enabled() {
            // Nothing is ever stored, so every call of a disabled cache arrives here.
            return Box::pin(inner.call_direct(&key, origin)).await;
        }
        inner.counters.misses.bump();
        inner.hot.miss(&key);
        #[cfg(feature = "metrics")]
        let asked = inner.clock.precise();
        let miss = inner.miss::<R, _, _>(key.clone(), seen, origin);
        // Boxed: the miss path's state stays off the stack of every hit.
        let answer = Box::pin(inner.within_deadline(&key, miss)).await;
        #[cfg(feature = "metrics")]
        crate::telemetry::miss_wait(
            inner.policy.name(),
            answer.is_ok(),
            inner.clock.precise().saturating_duration_since(asked),
        );
        answer
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// A miss: steps 1 and 2 in this caller, then the leader's steps as `R` runs them.
    /// `seen` is the generation of the expired value the lookup found.
    async fn miss<R, F, Fut>(self: &Arc<Self>, key: K, seen: Option<u64>, origin: F) -> Result<V, E>
    where
        R: Runner<K, V, E, F>,
        F: FnOnce(&K) -> Fut,
    {
        let leader = match self.join_miss(&key, seen).await {
            Turn::Lead(leader) => leader,
            Turn::Answered(answer) => return answer,
        };
        R::miss(self, key, leader, origin).await
    }

    /// A stale-window or XFetch (`early`) refresh of `current`, unless one is running:
    /// steps 1 and 2 without waiting, then the leader's steps as `R` runs them.
    async fn refresh<R, F, Fut>(
        self: &Arc<Self>,
        key: K,
        current: &Envelope<V>,
        origin: F,
        early: bool,
    ) -> Result<V, E>
    where
        R: Runner<K, V, E, F>,
        F: FnOnce(&K) -> Fut,
    {
        let Some(leader) = self.join_refresh(&key, current) else {
            return Ok(current.value.clone());
        };
        if early {
            self.counters.early_refreshes.bump();
        }
        R::refresh(self, key, leader, current.clone(), origin, early).await
    }

    /// Steps 1 and 2 of a miss: the leader of a new load (always, without coalescing), or
    /// an answer: the running load's, or a fresh value another flight stored after this
    /// caller read memory (`seen`).
    async fn join_miss(&self, key: &K, seen: Option<u64>) -> Turn<K, V, E> {
        if let Some(error) = self.known_error(key) {
            return Turn::Answered(Err(error));
        }
        if !self.policy.coalesce() || self.deaf_to_acknowledged_writes() {
            return Turn::Lead(self.flights.start(key));
        }
        let leader = match self.join(key).await {
            Turn::Lead(leader) => leader,
            answered => return answered,
        };
        match self.stored_since(key, seen) {
            Some(value) => {
                leader.settle(Ok(value.clone()), |_| {});
                Turn::Answered(Ok(value))
            }
            None => Turn::Lead(leader),
        }
    }

    /// A cache whose writes are acknowledged, on a replica whose hearing lease does not
    /// hold: a load running here may have begun before a write elsewhere returned, and no
    /// notice of it can have detached the load, so a caller does not join it (it loads on
    /// its own, from the store or the origin, until the replica hears again).
    fn deaf_to_acknowledged_writes(&self) -> bool {
        self.policy.consistency() == Consistency::Acknowledged
            && self.connected_tier().is_some_and(|tier| {
                tier.keeps_memory && !tier.replica.store().hearing_lease().holds()
            })
    }

    /// Joins `key`'s flight until this caller either leads it or has the leader's answer.
    async fn join(&self, key: &K) -> Turn<K, V, E> {
        let mut joined = false;
        // Before any flight is joined: a load whose answer rests on a read sent after
        // this answers this caller (see `Leader::rests_on`).
        let began = self.flights.tick();
        loop {
            let mut waiter = match self.flights.join(key) {
                Join::Leader(leader) => return Turn::Lead(leader),
                Join::Waiter(waiter) => waiter,
            };
            if leads(waiter.flight_id()) {
                // This task runs that flight's origin: waiting for it would be waiting
                // for itself, forever.
                return Turn::Answered(Err(self.fail(Error::Recursive {
                    cache: self.policy.name().clone(),
                })));
            }
            // A waiter that takes over and joins again is still one waiter.
            if !std::mem::replace(&mut joined, true) {
                self.counters.coalesced.bump();
                self.hot.coalesced(key);
            }
            // One span per origin call (the leader's); a waiter's span follows from it, so
            // a trace shows which load each waiting request was answered by.
            let wait = tracing::debug_span!(
                target: "stampede",
                "coalesced_wait",
                cache = %self.policy.name(),
            );
            // A batch stops waiting for this key: its load is another's.
            super::batch::parked();
            let outcome = async {
                tracing::trace!(target: "stampede", cache = %self.policy.name(), "waiting for the running load of this key");
                (&mut waiter).await
            }
            .instrument(wait.clone())
            .await;
            if let Some(load) = waiter.load_span() {
                wait.follows_from(load);
            }
            match outcome {
                // A value read before this caller joined may be one an invalidation
                // retired before it began (on another replica, whose notice has not
                // arrived): join again; a later flight reads after it. An error retires
                // nothing, and is shared.
                Outcome::Done(Ok(_)) if !waiter.answers(began) => continue,
                Outcome::Done(answer) => return Turn::Answered(answer),
                // The leader was dropped: join again; the first back leads.
                Outcome::Abandoned => continue,
            }
        }
    }

    /// Steps 1 and 2 of a refresh of `current`: the leader (a flight of its own when
    /// coalescing is off), or `None` when someone else is on it or has just finished.
    fn join_refresh(&self, key: &K, current: &Envelope<V>) -> Option<LoadLeader<K, V, E>> {
        if !self.policy.coalesce() {
            return Some(self.flights.start(key));
        }
        let Join::Leader(leader) = self.flights.join(key) else {
            return None;
        };
        match self.stored_since(key, Some(current.generation)) {
            Some(value) => {
                leader.settle(Ok(value), |_| {});
                None
            }
            None => Some(leader),
        }
    }

    /// A fresh value stored after the write `seen` (or any, with `None`). A caller that
    /// read memory and then became leader after another flight settled takes it instead
    /// of calling the origin a second time.
    fn stored_since(&self, key: &K, seen: Option<u64>) -> Option<V> {
        let current = self.memory.get(key)?;
        let newer = seen.is_none_or(|generation| current.generation > generation);
        (newer && current.state(self.clock.now()) == State::Fresh).then(|| current.value.clone())
    }

    /// The leader's steps (3 to 7), in order, in one tracing span. Both leader modes run
    /// these, so both read the store, queue and shed alike. A plain function around the
    /// steps' future, which owns what it needs (a detached load spawns it as it is): each
    /// `async` level around it would hold another copy of the arguments.
    pub(super) fn lead<O, Fut>(
        self: &Arc<Self>,
        key: K,
        leader: LoadLeader<K, V, E>,
        origin: O,
        purpose: Purpose<V>,
    ) -> impl Future<Output = Result<V, E>> + use<K, V, E, O, Fut>
    where
        O: FnOnce() -> Fut,
        Fut: Future<Output = Called<V, E>>,
    {
        let span = tracing::debug_span!(
            target: "stampede",
            "origin_load",
            cache = %self.policy.name(),
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        leader.traced(&span);
        let timed = Timed {
            span: span.clone(),
            asked: self.clock.precise(),
            clock: self.clock.clone(),
        };
        // Read here, in the leading caller's task, before a detached load leaves it.
        let priority = crate::per_call::current_priority().unwrap_or(self.policy.priority());
        Self::steps(self.clone(), key, leader, origin, purpose, timed, priority).instrument(span)
    }

    /// [`Inner::lead`]'s steps, in order; `timed` records their duration on the span when
    /// they end (or are dropped unfinished).
    ///
    /// A plain function returning an `async move` block, not an `async fn`: an `async fn`
    /// moves its arguments into locals of its own, and the future keeps both.
    ///
    /// Longer than a screen: the order of a load's steps, and who settles the flight after
    /// each, is what this function is for: split, the order would be read across several.
    fn steps<O, Fut>(
        self: Arc<Self>,
        key: K,
        leader: LoadLeader<K, V, E>,
        origin: O,
        purpose: Purpose<V>,
        timed: Timed,
        priority: Priority,
    ) -> impl Future<Output = Result<V, E>> + use<K, V, E, O, Fut>
    where
        O: FnOnce() -> Fut,
        Fut: Future<Output = Called<V, E>>,
    {
        let flight = leader.flight_id();
        let mut leader = Some(leader);
        async move {
            // Held (by reference: no second copy) until the steps end.
            let _timed = &timed;
            // 3. The shared store decides: a value there answers, or answers first and is
            // refreshed (3b), or the load goes on under the key's lease. Boxed (one
            // allocation), and only for a cache that has one: the store's steps are most
            // of a load's state, which every miss would otherwise carry (and move into its
            // task).
            let (mut found, stand_in) = if self.shared.is_some() {
                let read = async {
                    let mut decision = self.read_shared(&key, leader.as_ref(), purpose).await;
                    loop {
                        match decision {
                            Decision::Answer(answer) => {
                                return Err(self.answer(leader.take(), answer));
                            }
                            // 3b. Every caller answered at once (a stale value, or an early
                            // refresh's fresh one); the load refreshes it for the fleet.
                            Decision::Refresh { first, refresh } => {
                                if let Some(first) = first {
                                    let _ = self.answer(leader.take(), first);
                                }
                                let read = self.read_refresh(&key, leader.as_ref(), refresh);
                                decision = read.await;
                            }
                            Decision::Load { found, stand_in } => return Ok((found, stand_in)),
                        }
                    }
                };
                match Box::pin(read).await {
                    Ok(load) => load,
                    Err(answered) => return answered,
                }
            } else {
                (None, None)
            };
            // 4. An admission permit, or the load is shed (the queue's state boxed, for the
            // caches that have one).
            let admitted = match self.gate {
                Gate::Open => Ok(None),
                _ => Box::pin(self.admit(&key, priority)).await,
            };
            let permit = match admitted {
                Ok(permit) => permit,
                Err(refusal) => return self.refuse(key, leader, refusal, stand_in.map(|s| *s)),
            };
            // The tags' count of moves as the origin reads: a tag moved after this fences
            // the load out. Not before the shared store's steps: a load that waited out
            // another replica's lease across a tag's move reads the source after it, and
            // its value is current (counted from the start, it was refused, and the
            // fleet loaded the key once more).
            let began = self.tags_began();
            // 5. The origin.
            let (result, delta, panicked) = self.call_origin(flight, origin).await;
            drop(permit);
            let took = std::time::Duration::try_from_secs_f64(delta).unwrap_or_default();
            self.hot.origin_call(&key, took);
            // 6. What the load answers and stores; a new value goes to the shared store
            // under the fence its read returned (boxed, as the read is).
            let now = self.clock.now();
            let (answer, envelope) = self.judge(
                &key,
                result,
                delta,
                found.as_deref_mut(),
                stand_in.map(|s| *s),
                now,
            );
            let envelope = match envelope {
                Some(envelope) if self.tags.of.is_some() || self.shared.is_some() => {
                    let began = (began, timed.asked);
                    let written = self.publish(
                        &key,
                        found.as_deref_mut(),
                        envelope,
                        began,
                        ValueFrom::Origin,
                        leader.as_ref(),
                    );
                    match Box::pin(written).await {
                        Written::Kept(envelope) => envelope,
                        Written::TagMoved => {
                            // A caller may have joined after the tag moved: every waiter
                            // loads again (the flight is abandoned); this load's own
                            // caller, which asked before, gets its value.
                            drop(leader.take());
                            None
                        }
                    }
                }
                envelope => envelope,
            };
            // 7. Memory, under the flight's fences, and every waiter. An error met while a
            // tag moved is not kept (negative caching), as a value would not be stored.
            let answer = match answer {
                Err(error) if self.tags_moved_since(began) => self.settle(leader, Err(error), None),
                answer => self.conclude(leader, answer, envelope, now),
            };
            if panicked {
                outcome("panicked");
            }
            answer
        }
    }

    /// Step 4: a permit of the cache's admission semaphore (none needed without one) at
    /// the leading call's `priority`, or the error that stops this load: `Overloaded` past
    /// the queue timeout, or a closed gate's.
    async fn admit(&self, key: &K, priority: Priority) -> Result<Option<Permit>, Error> {
        let admission = match &self.gate {
            Gate::Open => return Ok(None),
            Gate::Closed(error) => return Err(error.clone()),
            Gate::Limited(admission) => admission,
        };
        let asked = self.clock.precise();
        // A batch stops waiting for this key while it queues.
        super::batch::parked();
        let group = self.admission_group.as_ref().map(|group| group(key));
        let replica = self.tier().map(|tier| &tier.replica);
        let permit = (admission.enter(priority, group, replica)).await;
        let waited = self.clock.precise().saturating_duration_since(asked);
        self.counters.admission_wait.record(waited);
        match permit {
            Ok(permit) => {
                self.counters.admitted.bump();
                Ok(Some(permit))
            }
            Err(shed) => {
                if shed == Shed::Early {
                    self.counters.shed_early.bump();
                }
                Err(Error::Overloaded {
                    cache: self.policy.name().clone(),
                    admission: admission.name().clone(),
                    waited,
                })
            }
        }
    }

    /// Step 5: the origin inside flight `flight` (so a load of its own key is told apart
    /// from a wait), timed for XFetch's recompute time; whether it panicked.
    async fn call_origin<O, Fut>(&self, flight: u64, origin: O) -> (Result<V, E>, f64, bool)
    where
        O: FnOnce() -> Fut,
        Fut: Future<Output = Called<V, E>>,
    {
        self.counters.origin_calls.bump();
        let started = self.clock.precise();
        let called = {
            let _panics = CountPanic(&self.counters.refresh_errors);
            match self.policy.load_timeout() {
                None => Some(within_leader(flight, origin()).await),
                // Boxed, with its timer: only the loads of a cache that sets one pay for
                // it, and the steps' future (every miss's) keeps its size.
                Some(limit) => Box::pin(within(limit, within_leader(flight, origin()))).await,
            }
        };
        let delta = self.clock.precise().saturating_duration_since(started);
        let (result, panicked) = match called {
            Some(Called::Returned(result)) => (result, false),
            Some(Called::Panicked) => {
                let cache = self.policy.name().clone();
                (Err(self.fail(Error::OriginPanicked { cache })), true)
            }
            // Abandoned: the origin's future is gone; what it held (its lease, its permit)
            // goes with this load's own end, as after a failure.
            None => {
                self.counters.load_timeouts.bump();
                let cache = self.policy.name().clone();
                // Read again rather than kept across the call: held, it made every miss's
                // future 16 bytes larger (512, at its bound).
                let after = self.policy.load_timeout().unwrap_or_default();
                (Err(self.fail(Error::LoadTimeout { cache, after })), false)
            }
        };
        // Recorded here rather than in the steps, whose future every miss boxes: there it
        // made that future 48 bytes larger (544, past its 512).
        #[cfg(feature = "metrics")]
        crate::telemetry::origin_call(
            self.policy.name(),
            match (&result, panicked) {
                (_, true) => "panicked",
                (Ok(_), false) => "loaded",
                (Err(_), false) => "failed",
            },
            delta,
        );
        (result, delta.as_secs_f64(), panicked)
    }
}

/// What joining a flight came to.
enum Turn<K: Hash + Eq + Clone, V: Clone, E: Clone> {
    Lead(LoadLeader<K, V, E>),
    Answered(Result<V, E>),
}

/// Why a leader loads.
pub(super) enum Purpose<V> {
    /// Nothing servable in memory. `detached`: the load outlives its callers, so its
    /// callers may be answered (with a stale value from the shared store) before it ends.
    Miss { detached: bool },
    /// A stale-window or XFetch refresh of the value callers are served meanwhile.
    /// Boxed: a load's state holds its purpose throughout.
    Refresh(Box<Refresh<V>>),
    /// `Cache::refresh`: the origin whatever memory and the shared store hold.
    Force,
}

impl<V> Purpose<V> {
    /// A stale-window or XFetch (`early`) refresh of `current`, which memory held.
    pub(super) fn refresh(current: Envelope<V>, early: bool) -> Self {
        Purpose::Refresh(Box::new(Refresh {
            current,
            early,
            from_store: false,
        }))
    }
}

/// Records how the current load ended on its span.
pub(super) fn outcome(outcome: &'static str) {
    tracing::Span::current().record("outcome", outcome);
}

/// Records a load's duration (`duration_ms`) on its span when dropped: when its steps
/// end, or when they are dropped unfinished.
pub(super) struct Timed {
    span: tracing::Span,
    asked: Instant,
    clock: crate::clock::Clock,
}

impl Drop for Timed {
    fn drop(&mut self) {
        let elapsed = self.clock.precise().saturating_duration_since(self.asked);
        self.span.record("duration_ms", elapsed.as_secs_f64() * 1e3);
    }
}

// Steps 6 and 7's synchronous halves: what a load answers and stores once its origin
// returned or it was refused, and settling memory and the flight's waiters under the
// flight's fences; and settling with an answer step 3 found.
impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// Step 6 for a load that called the origin: what it answers, and the envelope to
    /// store if any. A success is stored; a failure re-arms the last value when the
    /// fail-safe allows, or answers with `stand_in` (a stale value from the shared store)
    /// while it may be served. Errors are never stored, except under negative caching
    /// (see [`Inner::conclude`]).
    pub(super) fn judge(
        &self,
        key: &K,
        result: Result<V, E>,
        delta: f64,
        found: Option<&mut Found<K, V>>,
        stand_in: Option<Envelope<V>>,
        now: Instant,
    ) -> (Result<V, E>, Option<Envelope<V>>) {
        let generation = self.next_generation();
        match result {
            Ok(value) if !self.policy.caches(&value) => {
                // Answered, but neither memory nor the shared store keeps it (`cache_if`).
                outcome("not cached");
                (Ok(value), None)
            }
            Ok(value) => {
                let mut envelope = Envelope::fill(
                    value.clone(),
                    now,
                    &self.policy,
                    delta,
                    generation,
                    fastrand::f64(),
                );
                envelope.source_version = self.version_of(&value);
                outcome("loaded");
                (Ok(value), Some(envelope))
            }
            Err(error) => {
                self.counters.refresh_errors.bump();
                let last = (self.last_good(key, now)).or_else(|| self.shared_last_good(found, now));
                // Read before the origin was called: a tag may have moved since.
                let last = last.filter(Envelope::tags_current);
                let stand_in = stand_in.filter(Envelope::tags_current);
                match (last, self.servable(stand_in)) {
                    (Some(last), _) => {
                        outcome("fallback");
                        let rearmed = self.rearm(&last, now, generation);
                        (Ok(last.value), Some(rearmed))
                    }
                    (None, Some(current)) => {
                        // A failed refresh leaves the value it would have replaced.
                        outcome("stale");
                        (Ok(current), None)
                    }
                    (None, None) => {
                        outcome("failed");
                        (Err(error), None)
                    }
                }
            }
        }
    }

    /// Step 7 once the shared store has had its say: memory keeps `envelope` and the
    /// flight's waiters get `answer` (see [`Inner::settle`]); an error the policy keeps
    /// (negative caching) is kept under the flight's fences, as a value is.
    pub(super) fn conclude(
        &self,
        leader: Option<LoadLeader<K, V, E>>,
        answer: Result<V, E>,
        envelope: Option<Envelope<V>>,
        now: Instant,
    ) -> Result<V, E> {
        let kept = match &answer {
            Err(error) if self.policy.keeps_error(error) => self.policy.error_ttl(),
            _ => None,
        };
        match (&answer, &self.known_errors, kept, leader) {
            (Err(error), Some(known), Some(ttl), Some(leader)) => {
                // (Without a leader its callers were answered already.)
                let until = now + ttl;
                outcome("failed, kept");
                leader.settle(answer.clone(), |key| {
                    known.insert(key, error.clone(), until)
                });
                answer
            }
            (_, _, _, leader) => self.settle(leader, answer, envelope),
        }
    }

    /// Settles the flight with an answer step 3 found in the shared store; its read is
    /// let go (and a lease it took given back) only after, so a notice until then still
    /// fences the copy out.
    pub(super) fn answer(
        &self,
        leader: Option<LoadLeader<K, V, E>>,
        answer: Answer<K, V>,
    ) -> Result<V, E> {
        let Answer { value, copy, found } = answer;
        let answer = self.settle(leader, Ok(value), copy);
        drop(found);
        answer
    }

    /// Step 7: stores `envelope` in memory (unless an invalidation fenced the load out
    /// meanwhile) and hands `answer` to the flight's waiters. Without a leader (its
    /// callers were answered before the load ended) memory keeps nothing: only the
    /// flight's fence tells whether an invalidation passed meanwhile.
    pub(super) fn settle(
        &self,
        leader: Option<LoadLeader<K, V, E>>,
        answer: Result<V, E>,
        envelope: Option<Envelope<V>>,
    ) -> Result<V, E> {
        let Some(leader) = leader else {
            return answer;
        };
        let store = |key: K| {
            let Some(envelope) = envelope else { return };
            if self.below_mark(&key, &envelope) || self.older_than_held(&key, &envelope) {
                return;
            }
            // A value supersedes an error negative caching kept for its key.
            self.forget_error(&key);
            self.memory.insert(key, envelope);
        };
        leader.settle(answer.clone(), store);
        answer
    }

    /// Answers a load that may not call the origin, and settles its flight with that
    /// answer so every waiter gets it too: the value a refresh would replace (`stand_in`)
    /// while it may be served; for a shed load, the value memory holds when the policy
    /// lets it be served (as is inside its windows, re-armed like a failed load's fallback
    /// under `stale_if_error`); otherwise, and for a broken configuration, the error.
    pub(super) fn refuse(
        &self,
        key: K,
        leader: Option<LoadLeader<K, V, E>>,
        refusal: Error,
        stand_in: Option<Envelope<V>>,
    ) -> Result<V, E> {
        if let Some(stale) = self.servable(stand_in) {
            outcome("shed_stale");
            return self.settle(leader, Ok(stale), None);
        }
        let now = self.clock.now();
        let shed = matches!(refusal, Error::Overloaded { .. });
        let last = if shed {
            self.counters.shed.bump();
            // keep_until is stale_until, or later only under stale_if_error.
            self.memory.get(&key).filter(|last| now < last.keep_until)
        } else {
            None
        };
        let Some(last) = last else {
            outcome(if shed { "shed" } else { "refused" });
            return self.settle(leader, Err(self.fail(refusal)), None);
        };
        let rearmed = match last.state(now) {
            State::Fresh => None,
            State::Stale => {
                self.counters.oldest_stale_served.record(last.age(now));
                None
            }
            State::Expired => Some(self.rearm(&last, now, self.next_generation())),
        };
        outcome("shed_stale");
        self.settle(leader, Ok(last.value), rearmed)
    }

    /// The last value standing in for a load that could not give a new one (the origin
    /// failed, or the load was shed), re-armed for one throttle so the origin is retried
    /// once per throttle, not on every request.
    pub(super) fn rearm(&self, last: &Envelope<V>, now: Instant, generation: u64) -> Envelope<V> {
        self.counters.fallbacks.bump();
        self.counters.oldest_stale_served.record(last.age(now));
        let mut rearmed = last.rearm(now, self.policy.fail_safe_throttle());
        rearmed.generation = generation;
        rearmed
    }

    /// The value of `stale` if it may still be served now.
    pub(super) fn servable(&self, stale: Option<Envelope<V>>) -> Option<V> {
        let now = self.clock.now();
        stale
            .filter(|stale| stale.state(now) != State::Expired)
            .map(|stale| stale.value)
    }
}
