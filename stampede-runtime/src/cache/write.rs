//! Writes a caller asks for: a value put in the cache (write-through), and a load that
//! calls the origin whatever the cache holds (a forced refresh). Both store through the
//! fences, as every load does.
use super::leader::within_leader;
use super::*;
use crate::remote::store::LeaseFor;

impl<K, V, E> Cache<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Puts `value` in the cache for `key` (write-through): in memory and, on a shared
    /// backend, in the shared store for every replica. Loads of `key` already running,
    /// here or on another replica, read the origin before this write, so they are fenced
    /// out first, as by [`Cache::invalidate`]: they still answer their callers, but none
    /// can store its older value over this one.
    ///
    /// [`Error::Backend`] when the shared store could not take the fence: the value is in
    /// this process's memory, and the invalidation is queued (see [`Cache::invalidate`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("write-through").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, String> = Cache::new(policy);
    /// cache.insert(7, "seven".to_owned()).await.unwrap();
    /// let value = cache.load(7, || async { unreachable!("a hit") }).await.unwrap();
    /// assert_eq!(value, "seven");
    /// # }
    /// ```
    pub async fn insert(&self, key: K, value: V) -> Result<(), Error> {
        let inner = &self.inner;
        if !inner.policy.enabled() {
            return Ok(());
        }
        inner.flights.invalidate(&key);
        inner.store.invalidate(&key);
        inner.forget_error(&key);
        let fenced = inner.invalidate_shared(&key).await;
        // A load of its own, so an invalidation from here on keeps this value out too.
        if !inner.policy.caches(&value) {
            // A value the policy never stores (`cache_if`): the key is only cleared.
            return fenced;
        }
        let leader = inner.flights.start(&key);
        // The lease whatever is stored, as a refresh takes it: the value goes out under
        // the newest fence, past the one this insert just raised.
        let mut found = inner.find_shared(&key, LeaseFor::Refresh, None).await;
        let now = inner.clock.now();
        let answer = Ok(value.clone());
        let envelope = Envelope::fill(
            value,
            now,
            &inner.policy,
            0.0,
            inner.next_generation(),
            fastrand::f64(),
        );
        let envelope = inner
            .write_shared(&key, found.as_mut(), envelope, now)
            .await;
        // Nobody joins this load: its answer only completes the flight.
        let _ = inner.settle(Some(leader), answer, envelope);
        fenced
    }

    /// Calls the origin for `key` whatever the cache holds, and stores what it returns as
    /// any load does (the shared store too, under the fence its read returned). It does
    /// not join a running load, whose origin call may have started before the caller
    /// asked; callers of `key` meanwhile keep getting the current value or join their own
    /// load. It goes through the admission semaphore and keeps the policy's deadline,
    /// and a kept error ([`PolicyBuilder::cache_errors`](crate::PolicyBuilder::cache_errors))
    /// does not answer it.
    pub async fn refresh<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.refresh_keyed(key, move |_| origin()).await
    }

    /// [`Cache::refresh`] with an origin that receives the key.
    pub async fn refresh_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        let origin = lookup::bind(origin, &key);
        if !inner.policy.enabled() {
            return Box::pin(inner.call_direct(origin)).await;
        }
        let reload = inner.reload(key.clone(), origin);
        Box::pin(inner.within_deadline(&key, reload)).await
    }
}

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// A load that skips what memory and the shared store hold. Loads of the key already
    /// running started before it, so they are fenced out first, here and (by taking the
    /// key's lease from whoever holds it) on every replica: none can store over what this
    /// one returns. Its own ticket and fence are taken before the origin is called, so an
    /// invalidation while it runs keeps its value out.
    async fn reload<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.flights.invalidate(&key);
        let leader = self.flights.start(&key);
        let found = self.find_shared(&key, LeaseFor::Force, None).await;
        let permit = match self.admit().await {
            Ok(permit) => permit,
            Err(refusal) => return self.refuse(key, Some(leader), refusal).0,
        };
        self.counters.origin_calls.bump();
        let started = self.clock.precise();
        let result = within_leader(leader.flight_id(), origin()).await;
        drop(permit);
        let delta = self.clock.precise().saturating_duration_since(started);
        self.publish(key, Some(leader), result, delta.as_secs_f64(), found, None)
            .await
            .0
    }
}
