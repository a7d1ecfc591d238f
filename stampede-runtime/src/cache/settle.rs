//! Steps 6 and 7 of a load (`load.rs` runs them in order): what a load answers and
//! stores once its origin returned or it was refused, and settling memory and the flight's
//! waiters under the flight's fences; and settling with an answer step 3 found.
use super::load::outcome;
use super::remote::Answer;
use super::{Inner, LoadLeader};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::{Envelope, State};
use crate::error::Error;
use crate::remote::tier::Found;

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
                let last = (self.last_good(key, now)).or_else(|| self.remote_last_good(found, now));
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
            self.store.insert(key, envelope);
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
            self.store.get(&key).filter(|last| now < last.keep_until)
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
