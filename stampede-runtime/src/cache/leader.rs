//! The two leader modes: joining a key's flight, and running its leader detached (its
//! own task) or inline (in the leading caller, with takeover), for misses and refreshes.
use super::*;

impl<K, V, E> Cache<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    pub(super) async fn miss_detached<F, Fut>(
        &self,
        key: K,
        seen: Option<u64>,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let inner = &self.inner;
        // Boxed where they are rare, so a waiting caller does not carry a whole load.
        // Uncoalesced, a load is still its own task: a caller that gives up must not cancel
        // it, or an origin slower than the deadline would never be cached.
        let leader = match inner.lead_miss(&key, seen).await {
            Turn::Lead(leader) => leader,
            Turn::Answered(shared) => return shared,
        };
        let waiter = leader.waiter();
        let purpose = Purpose::Miss { detached: true };
        let load = inherit(run_detached(inner.clone(), key, leader, origin, purpose));
        // Boxed in a statement of its own: a binding alive across an `.await` is stored in
        // this future, and the load is most of a waiting caller's memory otherwise.
        let unspawned = spawn(load).err().map(Box::pin);
        match unspawned {
            None => match waiter.await {
                Outcome::Done(shared) => shared,
                Outcome::Abandoned => Err(inner.fail(Error::Aborted {
                    cache: inner.policy.name().clone(),
                })),
            },
            // No Tokio runtime to run it on: this caller runs it.
            Some(load) => load.await,
        }
    }

    pub(super) async fn miss_inline<F, Fut>(
        &self,
        key: K,
        seen: Option<u64>,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        match inner.lead_miss(&key, seen).await {
            Turn::Lead(leader) => {
                let purpose = Purpose::Miss { detached: false };
                inner.run_inline(key, leader, origin, purpose).await
            }
            Turn::Answered(shared) => shared,
        }
    }

    /// Starts one refresh of `current` in the background, unless one is running.
    pub(super) async fn refresh_detached<F, Fut>(
        &self,
        key: K,
        current: &Envelope<V>,
        origin: F,
        early: bool,
    ) where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let inner = &self.inner;
        let Some(leader) = inner.lead_refresh(&key, current) else {
            return;
        };
        if early {
            inner.counters.early_refreshes.bump();
        }
        // Nobody waits for a background refresh, so it runs outside the flights its caller
        // leads: an origin it calls may wait for them without forming a cycle.
        let current = Purpose::Refresh {
            current: current.clone(),
            early,
        };
        let refresh = run_detached(inner.clone(), key, leader, origin, current);
        if let Err(task) = spawn(refresh.instrument(tracing::Span::current())) {
            let _ = Box::pin(task).await;
        }
    }

    /// Refreshes `current` in this caller, unless a refresh is running; a refresh that
    /// fails or overruns the deadline leaves `current` as the answer.
    pub(super) async fn refresh_inline<F, Fut>(
        &self,
        key: K,
        current: &Envelope<V>,
        origin: F,
        early: bool,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        let Some(leader) = inner.lead_refresh(&key, current) else {
            return Ok(current.value.clone());
        };
        if early {
            inner.counters.early_refreshes.bump();
        }
        let purpose = Purpose::Refresh {
            current: current.clone(),
            early,
        };
        let refresh = inner.run_inline(key, leader, origin, purpose);
        let refreshed = match inner.policy.timeout() {
            Some(limit) => deadline::within(limit, refresh).await,
            None => Some(refresh.await),
        };
        match refreshed {
            Some(Ok(value)) => Ok(value),
            _ => Ok(current.value.clone()),
        }
    }
}

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// This caller's part in a miss, in either leader mode: the leader of a new load
    /// (always, without coalescing), or an answer: the running load's, or a fresh value
    /// another flight stored after this caller read memory (`seen`).
    pub(super) async fn lead_miss(&self, key: &K, seen: Option<u64>) -> Turn<K, V, E> {
        if let Some(error) = self.known_error(key) {
            return Turn::Answered(Err(error));
        }
        if !self.policy.coalesce() {
            return Turn::Lead(self.flights.start(key));
        }
        let leader = match self.lead_or_wait(key).await {
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

    /// Joins `key`'s flight until this caller either leads it or has the leader's answer.
    pub(super) async fn lead_or_wait(&self, key: &K) -> Turn<K, V, E> {
        let mut joined = false;
        loop {
            match self.flights.join(key) {
                Join::Leader(leader) => return Turn::Lead(leader),
                Join::Waiter(waiter) => {
                    if leads(waiter.flight_id()) {
                        // This task runs that flight's origin: waiting for it would be
                        // waiting for itself, forever.
                        return Turn::Answered(Err(self.fail(Error::Recursive {
                            cache: self.policy.name().clone(),
                        })));
                    }
                    // A waiter that takes over and joins again is still one waiter.
                    if !std::mem::replace(&mut joined, true) {
                        self.counters.coalesced.bump();
                    }
                    // Waiters are events inside the caller's span; only the load is a span.
                    tracing::trace!(target: "stampede", cache = %self.policy.name(), "waiting for the running load of this key");
                    match waiter.await {
                        Outcome::Done(shared) => return Turn::Answered(shared),
                        // The leader was dropped: join again; the first back leads.
                        Outcome::Abandoned => continue,
                    }
                }
            }
        }
    }

    /// Whether this caller should refresh `current`: `Some(leader)` (or `Some(None)` when
    /// coalescing is off), `None` when someone else is on it or has just finished.
    pub(super) fn lead_refresh(
        self: &Arc<Self>,
        key: &K,
        current: &Envelope<V>,
    ) -> Option<SharedLeader<K, V, E>> {
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
    /// read the store and then became leader after another flight settled takes it instead
    /// of calling the origin a second time.
    pub(super) fn stored_since(&self, key: &K, seen: Option<u64>) -> Option<V> {
        let current = self.store.get(key)?;
        let newer = seen.is_none_or(|generation| current.generation > generation);
        (newer && current.state(self.clock.now()) == State::Fresh).then(|| current.value.clone())
    }

    /// Calls the origin in this task. A panic or cancellation here drops `leader`
    /// unsettled, and a waiter takes over.
    pub(super) async fn run_inline<F, Fut>(
        &self,
        key: K,
        leader: SharedLeader<K, V, E>,
        origin: F,
        purpose: Purpose<V>,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.lead(key, leader, || origin().map(Called::Returned), purpose)
            .await
    }
}

/// What joining a flight came to.
pub(super) enum Turn<K: Hash + Eq + Clone, V: Clone, E: Clone> {
    Lead(SharedLeader<K, V, E>),
    Answered(Result<V, E>),
}

/// Why a leader loads.
pub(super) enum Purpose<V> {
    /// Nothing servable in memory. `detached`: the load runs as its own task, so its
    /// callers may be answered (with a stale value from the shared store) before it ends.
    Miss { detached: bool },
    /// A stale-window or XFetch (`early`) refresh of `current`, which callers are served
    /// meanwhile.
    Refresh { current: Envelope<V>, early: bool },
}

/// What an origin call came to: its result, or a panic a detached flight caught.
pub(super) enum Called<V, E> {
    Returned(Result<V, E>),
    Panicked,
}

/// Runs a detached flight: admission, the origin with its panic caught and shared as an
/// error, then publishing. Owns everything, so it can be its own task.
pub(super) async fn run_detached<K, V, E, F, Fut>(
    inner: Arc<Inner<K, V, E>>,
    key: K,
    leader: SharedLeader<K, V, E>,
    origin: F,
    purpose: Purpose<V>,
) -> Result<V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<V, E>>,
{
    let origin = || {
        AssertUnwindSafe(async move { origin().await })
            .catch_unwind()
            .map(|called| called.map_or(Called::Panicked, Called::Returned))
    };
    inner.lead(key, leader, origin, purpose).await
}

tokio::task_local! {
    /// The flights whose origin the current task is running, innermost last.
    static LEADING: Vec<u64>;
}

/// Whether the current task runs the origin of flight `id` (directly or further out).
pub(super) fn leads(id: u64) -> bool {
    LEADING
        .try_with(|leading| leading.contains(&id))
        .unwrap_or(false)
}

/// A task started on the caller's behalf keeps what the caller had: the flights it leads,
/// and its tracing span, so the load and the origin's own events stay inside the request.
pub(super) fn inherit<T: Future>(task: T) -> impl Future<Output = T::Output> {
    let leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    LEADING.scope(leading, task.instrument(tracing::Span::current()))
}

/// Runs `task` as its own Tokio task, or hands it back when there is no runtime to run it.
pub(super) fn spawn<T>(task: T) -> Result<(), T>
where
    T: Future + Send + 'static,
    T::Output: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            drop(runtime.spawn(task));
            Ok(())
        }
        Err(_) => Err(task),
    }
}

/// Runs an origin as the leader of flight `id`.
pub(super) fn within_leader<T: Future>(id: u64, origin: T) -> impl Future<Output = T::Output> {
    let mut leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    leading.push(id);
    LEADING.scope(leading, origin)
}
