//! The path of one call, and the only module that knows the order of its steps:
//!
//! ```text
//! lookup -> Fresh -> (XFetch says refresh early? start one refresh) -> value
//!        -> Stale -> start one refresh -> stale value
//!        -> Expired or absent -> join the key's flight, within the caller's deadline
//!              waiter -> the leader's outcome (or take over if the leader was dropped)
//!              leader -> re-check memory -> the shared store (redis, tiered backends)
//!                        -> fresh there? take it, wake waiters
//!                        -> admission permit -> origin
//!                        -> publish (the shared store under the read's fence, then
//!                           memory, then wake waiters)
//!                 (no permit within the queue timeout: shed, the stale value or Overloaded)
//! ```
//!
//! Two leader modes (DESIGN.md decision 1): [`Cache::load`] runs the origin as its own task,
//! so no caller's cancellation stops work others wait for; [`Cache::load_inline`] runs it in
//! the leading caller's task, for origins that borrow, and a waiter takes over when that
//! caller goes away.
use crate::admission::Gate;
use crate::clock::{Clock, Instant};
use crate::config::{Backend, Runtime};
use crate::deadline;
use crate::envelope::{Envelope, State};
use crate::error::Error;
use crate::flight::{Flights, Join, Leader, Outcome};
use crate::policy::Policy;
use crate::stats::{Counters, Observed, Stats};
use crate::store::memory::MemoryStore;
use crate::store::shared::StoreEvent;
use crate::store::tiered::{Codec, Found, Tier};
use crate::xfetch;
use futures_util::future::Either;
use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, OwnedSemaphorePermit};
use tracing::Instrument;

/// A cache whose misses load through a caller-supplied origin, once per key at a time.
///
/// `E` is the error type of fallible origins; framework failures reach callers as
/// `E::from(stampede::Error)` (see [`Cache::with_error_map`] where `From` cannot be written).
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{Cache, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let policy = Policy::builder("square").fresh(Duration::from_secs(60)).build().unwrap();
/// let cache: Cache<u64, u64> = Cache::new(policy);
/// let value = cache.load(12, || async { Ok(12 * 12) }).await.unwrap();
/// assert_eq!(value, 144);
/// // Served from memory; the origin is not called again.
/// let again = cache.load(12, || async { unreachable!() }).await.unwrap();
/// assert_eq!((again, cache.stats().origin_calls), (144, 1));
/// # }
/// ```
pub struct Cache<K, V, E = Error> {
    inner: Arc<Inner<K, V, E>>,
}

/// Builds a [`Cache`] with settings beyond its [`Policy`].
#[must_use]
pub struct CacheBuilder<K, V, E> {
    policy: Policy,
    /// Unset: the runtime's clock.
    clock: Option<Clock>,
    map_error: fn(Error) -> E,
    runtime: Option<Runtime>,
    /// The callers cannot receive an error (functions returning a plain value).
    infallible: bool,
    /// Why this cache may serve no load whatever its runtime says.
    refusal: Option<Error>,
    /// How keys and values are written to a shared store; without one the cache stays in
    /// memory under any backend.
    codec: Option<Codec<K, V>>,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V, E> CacheBuilder<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Framework failures reach callers as `map_error(stampede::Error)`. The cache stays
    /// in memory whatever the runtime's backend, unless [`shared`](Self::shared) lets it
    /// go to the shared store ([`Cache::builder`] does).
    pub fn new(policy: Policy, map_error: fn(Error) -> E) -> Self {
        CacheBuilder {
            policy,
            clock: None,
            map_error,
            runtime: None,
            infallible: false,
            refusal: None,
            codec: None,
            types: PhantomData,
        }
    }

    /// Lets the cache keep its values where its runtime's backend says (Redis, or memory
    /// in front of Redis): serde writes the key into the entry's name and the value into
    /// its envelope. Caches of the same `name`, `version` and key type address the same
    /// entries, in code or through `#[cached]`.
    pub fn shared(mut self) -> Self
    where
        K: Serialize,
        V: Serialize + DeserializeOwned,
    {
        self.codec = Some(Codec::new());
        self
    }

    /// Keeps the cache in this process's memory whatever the runtime's backend (what
    /// `local` does on the attribute).
    pub fn local(mut self) -> Self {
        self.codec = None;
        self
    }

    /// Where the cache reads the time (default: its runtime's, see
    /// [`RuntimeBuilder::clock`](crate::RuntimeBuilder::clock)).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The runtime whose admission semaphores and per-function overrides the cache uses
    /// (default: the process's, see [`Runtime::global`]).
    pub fn runtime(mut self, runtime: &Runtime) -> Self {
        self.runtime = Some(runtime.clone());
        self
    }

    /// For callers that cannot receive an error: configuration that would answer them
    /// with one (a deadline, an admission limit or a fail-safe override, a broken file)
    /// is left out with a warning, and the function keeps working with its compiled
    /// settings.
    pub(crate) fn infallible(mut self) -> Self {
        self.infallible = true;
        self
    }

    /// Every load fails with `error` (a name another cache already has), as with a
    /// broken configuration.
    pub(crate) fn refuse(mut self, error: Option<Error>) -> Self {
        self.refusal = error;
        self
    }

    /// The cache, with its runtime's overrides for the policy's name applied. A runtime
    /// that cannot serve it (an admission name it does not define; an invalid environment
    /// on first use) does not fail here: every load fails with that error instead.
    pub fn build(self) -> Cache<K, V, E> {
        let runtime = self.runtime.map_or_else(Runtime::global, Ok);
        let compiled = self.policy.clone();
        let clock = match (self.clock, &runtime) {
            (Some(clock), _) => clock,
            (None, Ok(runtime)) => runtime.clock().clone(),
            (None, Err(_)) => Clock::default(),
        };
        let (policy, gate) = match &runtime {
            Ok(runtime) => runtime.bind(self.policy),
            Err(error) => {
                let cache = self.policy.name().clone();
                let error = error.clone();
                (self.policy, Gate::Closed(Error::Config { cache, error }))
            }
        };
        let gate = self.refusal.map_or(gate, Gate::Closed);
        let (policy, gate) = match (self.infallible, gate) {
            (false, gate) => (policy, gate),
            (true, Gate::Closed(error)) => {
                tracing::warn!(target: "stampede", %error, "configuration ignored: this function cannot fail");
                (compiled, Gate::Open)
            }
            (true, _) if policy.has_error_path() => {
                tracing::warn!(
                    target: "stampede",
                    cache = %policy.name(),
                    "timeout, admission and stale_if_error overrides ignored: this function cannot fail"
                );
                (policy.without_error_path(), Gate::Open)
            }
            (true, gate) => (policy, gate),
        };
        let shared = match (&runtime, self.codec) {
            (Ok(runtime), Some(codec)) => {
                let keeps_memory = match runtime.backend() {
                    Backend::Memory => None,
                    Backend::Redis { .. } => Some(false),
                    Backend::Tiered { .. } => Some(true),
                };
                keeps_memory.map(|keeps_memory| SharedSide {
                    runtime: runtime.clone(),
                    codec,
                    keeps_memory,
                    tier: OnceLock::new(),
                })
            }
            _ => None,
        };
        let inner = Arc::new_cyclic(|me| Inner {
            store: MemoryStore::new(&policy),
            policy,
            gate,
            clock,
            flights: Arc::new(Flights::new()),
            counters: Counters::default(),
            generation: AtomicU64::new(0),
            map_error: self.map_error,
            shared,
            me: me.clone(),
        });
        if let Ok(runtime) = runtime {
            let observed: Weak<dyn Observed> = Arc::downgrade(&inner) as Weak<_>;
            runtime.register(observed);
        }
        Cache { inner }
    }
}

struct Inner<K, V, E> {
    policy: Policy,
    gate: Gate,
    clock: Clock,
    store: MemoryStore<K, V>,
    flights: Arc<Flights<K, Result<V, E>>>,
    counters: Counters,
    generation: AtomicU64,
    map_error: fn(Error) -> E,
    /// The shared store, for a cache that may go there on a runtime that has one.
    shared: Option<SharedSide<K, V>>,
    /// Itself, for the notice listener it starts.
    me: Weak<Inner<K, V, E>>,
}

/// A cache's way to the shared store, connected on its first load.
struct SharedSide<K, V> {
    runtime: Runtime,
    codec: Codec<K, V>,
    /// Tiered: memory keeps copies of shared values.
    keeps_memory: bool,
    tier: OnceLock<Option<Arc<Tier<K, V>>>>,
}

impl<K, V, E> Clone for Cache<K, V, E> {
    fn clone(&self) -> Self {
        Cache {
            inner: self.inner.clone(),
        }
    }
}

impl<K, V, E> fmt::Debug for Cache<K, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("name", self.inner.policy.name())
            .finish_non_exhaustive()
    }
}

impl<K, V, E> Cache<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// A cache whose callers receive framework failures as `E::from(stampede::Error)`,
    /// on the process's runtime and its backend.
    pub fn new(policy: Policy) -> Self
    where
        E: From<Error>,
        K: Serialize,
        V: Serialize + DeserializeOwned,
    {
        Self::builder(policy).build()
    }

    /// A cache whose callers receive framework failures as `map_error(stampede::Error)`.
    pub fn with_error_map(policy: Policy, map_error: fn(Error) -> E) -> Self
    where
        K: Serialize,
        V: Serialize + DeserializeOwned,
    {
        CacheBuilder::new(policy, map_error).shared().build()
    }

    /// A builder for settings beyond the policy (the runtime, the clock). The cache goes
    /// where its runtime's backend says; [`CacheBuilder::local`] keeps it in memory, and
    /// [`CacheBuilder::new`] builds caches of types serde cannot write.
    pub fn builder(policy: Policy) -> CacheBuilder<K, V, E>
    where
        E: From<Error>,
        K: Serialize,
        V: Serialize + DeserializeOwned,
    {
        CacheBuilder::new(policy, E::from).shared()
    }

    /// The policy this cache was built with.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The limit of the admission semaphore this cache's loads go through, if any.
    pub(crate) fn admission_limit(&self) -> Option<usize> {
        self.inner.gate.limit()
    }

    /// The value cached for `key` if it may still be served (fresh or stale), without
    /// loading or counting.
    pub fn peek(&self, key: &K) -> Option<V> {
        let envelope = self.inner.store.get(key)?;
        (envelope.state(self.inner.clock.now()) != State::Expired).then(|| envelope.value.clone())
    }

    /// Drops `key`'s value, in this process at once and, on a shared backend, in every
    /// replica: the key's fence in Redis is raised and tiered nodes drop their copies. A
    /// load of `key` already running, here or on another replica, still answers its
    /// waiters but does not store its result, which was computed before the invalidation;
    /// the next call loads anew.
    ///
    /// [`Error::Backend`] when the shared store could not take it: it applied here and is
    /// queued, and replayed before this replica reads the shared store again.
    pub async fn invalidate(&self, key: &K) -> Result<(), Error> {
        // Fence first: a load that stores before the fence moves is removed just after.
        self.inner.flights.invalidate(key);
        self.inner.store.invalidate(key);
        self.inner.invalidate_shared(key).await
    }

    /// Drops every value in this process, with the same rule for running loads as
    /// [`Cache::invalidate`]. On a shared backend, entries in Redis stay until they
    /// expire or are invalidated by key, which the returned [`Error::Backend`] says.
    pub async fn invalidate_all(&self) -> Result<(), Error> {
        self.inner.flights.invalidate_all();
        self.inner.store.invalidate_all();
        match &self.inner.shared {
            None => Ok(()),
            Some(_) => Err(Error::Backend {
                cache: self.inner.policy.name().clone(),
                message: "invalidate_all drops this replica's values only; shared entries stay until they expire or are invalidated by key".into(),
            }),
        }
    }

    /// Returns `key`'s value, loading it through `origin` when nothing servable is cached.
    ///
    /// **Detached mode**: the origin runs as its own Tokio task. A caller that times out or
    /// is dropped never cancels work others wait for, and the result still fills the cache.
    /// Stale-window and XFetch refreshes run in the background. A panicking origin gives
    /// every waiter [`Error::OriginPanicked`]. Outside a Tokio runtime it behaves like
    /// [`Cache::load_inline`].
    pub async fn load<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        self.load_keyed(key, move |_| origin()).await
    }

    /// [`Cache::load`] with an origin that receives the key: callers that moved their
    /// inputs into the key get them back from it, so a hit clones nothing.
    pub async fn load_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let inner = &self.inner;
        let now = inner.clock.now();
        let seen = match inner.store.get(&key) {
            // The hit path: a lookup and a timestamp compare; the value moves out.
            Some(current) => match current.state(now) {
                State::Fresh => {
                    inner.count_hit(&current, now);
                    if inner.refresh_early(&current, now) {
                        let origin = bind(origin, &key);
                        Box::pin(self.refresh_detached(key, &current, origin, true)).await;
                    }
                    return Ok(current.value);
                }
                State::Stale => {
                    inner.count_stale(&current, now);
                    let origin = bind(origin, &key);
                    Box::pin(self.refresh_detached(key, &current, origin, false)).await;
                    return Ok(current.value);
                }
                State::Expired => Some(current.generation),
            },
            None => None,
        };
        let origin = bind(origin, &key);
        if !inner.policy.enabled() {
            // Nothing is ever stored, so every call of a disabled cache arrives here.
            return Box::pin(inner.call_direct(origin)).await;
        }
        inner.counters.misses.bump();
        // Boxed: the miss path's state stays off the stack of every hit.
        Box::pin(inner.within_deadline(&key, self.miss_detached(key.clone(), seen, origin))).await
    }

    /// Returns `key`'s value, loading it through `origin` when nothing servable is cached.
    ///
    /// **Inline mode with takeover**, for origins that borrow: the leading caller runs the
    /// origin in its own task. If that caller is dropped (say, by its deadline) or panics,
    /// one waiter takes over and calls the origin. A stale-window or XFetch refresh runs in
    /// the caller that triggers it, while every other caller keeps getting the current
    /// value.
    pub async fn load_inline<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.load_inline_keyed(key, move |_| origin()).await
    }

    /// [`Cache::load_inline`] with an origin that receives the key.
    pub async fn load_inline_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        let now = inner.clock.now();
        let seen = match inner.store.get(&key) {
            Some(current) => match current.state(now) {
                State::Fresh => {
                    inner.count_hit(&current, now);
                    if !inner.refresh_early(&current, now) {
                        return Ok(current.value);
                    }
                    let origin = bind(origin, &key);
                    return Box::pin(self.refresh_inline(key, &current, origin, true)).await;
                }
                State::Stale => {
                    inner.count_stale(&current, now);
                    let origin = bind(origin, &key);
                    return Box::pin(self.refresh_inline(key, &current, origin, false)).await;
                }
                State::Expired => Some(current.generation),
            },
            None => None,
        };
        let origin = bind(origin, &key);
        if !inner.policy.enabled() {
            return Box::pin(inner.call_direct(origin)).await;
        }
        inner.counters.misses.bump();
        Box::pin(inner.within_deadline(&key, self.miss_inline(key.clone(), seen, origin))).await
    }

    async fn miss_detached<F, Fut>(&self, key: K, seen: Option<u64>, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let inner = &self.inner;
        // Boxed where they are rare, so a waiting caller does not carry a whole load.
        if !inner.policy.coalesce() {
            let leader = inner.flights.start(&key);
            return Box::pin(run_detached(inner.clone(), key, leader, origin)).await;
        }
        let leader = match inner.lead_or_wait(&key).await {
            Turn::Lead(leader) => leader,
            Turn::Answered(shared) => return shared,
        };
        if let Some(value) = inner.stored_since(&key, seen) {
            leader.settle(Ok(value.clone()), |_| {});
            return Ok(value);
        }
        let waiter = leader.waiter();
        match spawn(inherit(run_detached(inner.clone(), key, leader, origin))) {
            Ok(()) => match waiter.await {
                Outcome::Done(shared) => shared,
                Outcome::Abandoned => Err(inner.fail(Error::Aborted {
                    cache: inner.policy.name().clone(),
                })),
            },
            Err(task) => Box::pin(task).await,
        }
    }

    async fn miss_inline<F, Fut>(&self, key: K, seen: Option<u64>, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        if !inner.policy.coalesce() {
            let leader = inner.flights.start(&key);
            return inner.run_inline(key, leader, origin).await;
        }
        let leader = match inner.lead_or_wait(&key).await {
            Turn::Lead(leader) => leader,
            Turn::Answered(shared) => return shared,
        };
        if let Some(value) = inner.stored_since(&key, seen) {
            leader.settle(Ok(value.clone()), |_| {});
            return Ok(value);
        }
        inner.run_inline(key, leader, origin).await
    }

    /// Starts one refresh of `current` in the background, unless one is running.
    async fn refresh_detached<F, Fut>(&self, key: K, current: &Envelope<V>, origin: F, early: bool)
    where
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
        if let Err(task) = spawn(inherit(run_detached(inner.clone(), key, leader, origin))) {
            let _ = Box::pin(task).await;
        }
    }

    /// Refreshes `current` in this caller, unless a refresh is running; a refresh that
    /// fails or overruns the deadline leaves `current` as the answer.
    async fn refresh_inline<F, Fut>(
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
        let refresh = inner.run_inline(key, leader, origin);
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

type SharedLeader<K, V, E> = Leader<K, Result<V, E>>;

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    fn fail(&self, error: Error) -> E {
        (self.map_error)(error)
    }

    fn count_hit(&self, envelope: &Envelope<V>, now: Instant) {
        if envelope.rearmed {
            self.count_stale(envelope, now);
        } else {
            self.counters.fresh_hits.bump();
        }
    }

    /// Off the fresh-hit path: a value served in place of a fresh one, and how old it was.
    #[cold]
    fn count_stale(&self, envelope: &Envelope<V>, now: Instant) {
        self.counters.stale_hits.bump();
        self.counters.oldest_stale_served.record(envelope.age(now));
    }

    /// Caching is off for this function: the origin, directly, every time.
    async fn call_direct<F, Fut>(&self, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.counters.origin_calls.bump();
        origin().await
    }

    fn refresh_early(&self, envelope: &Envelope<V>, now: Instant) -> bool {
        match self.policy.xfetch_beta() {
            // A fallback served by the fail-safe waits for its throttle, not for XFetch.
            Some(beta) if !envelope.rearmed => xfetch::should_refresh_early(
                envelope.fresh_until.saturating_duration_since(now),
                envelope.delta,
                beta,
                xfetch::draw_u(),
            ),
            _ => false,
        }
    }

    /// Joins `key`'s flight until this caller either leads it or has the leader's answer.
    async fn lead_or_wait(&self, key: &K) -> Turn<K, V, E> {
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
    fn lead_refresh(
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
    fn stored_since(&self, key: &K, seen: Option<u64>) -> Option<V> {
        let current = self.store.get(key)?;
        let newer = seen.is_none_or(|generation| current.generation > generation);
        (newer && current.state(self.clock.now()) == State::Fresh).then(|| current.value.clone())
    }

    /// Calls the origin in this task. A panic or cancellation here drops `leader`
    /// unsettled, and a waiter takes over.
    async fn run_inline<F, Fut>(
        &self,
        key: K,
        leader: SharedLeader<K, V, E>,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.lead(key, leader, || origin().map(Called::Returned))
            .await
    }

    /// The leader's part of a load, in one tracing span: an admission permit, the origin,
    /// publishing. Shared by both leader modes, so both queue and shed alike.
    async fn lead<F, Fut>(&self, key: K, leader: SharedLeader<K, V, E>, origin: F) -> Result<V, E>
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
            let mut found = self.find_shared(&key).await;
            let now = self.clock.now();
            let fresh = (found.as_mut()).and_then(|found| {
                found
                    .envelope
                    .take_if(|stored| stored.state(now) == State::Fresh)
            });
            if let Some(stored) = fresh {
                // Another replica loaded it: no origin call.
                let value = Ok(stored.value.clone());
                let copy = self.memory_copy(&key, found.as_ref(), stored);
                let span = tracing::Span::current();
                span.record("outcome", "shared");
                return self.settle(leader, value, copy);
            }
            let (shared, outcome) = match self.admit().await {
                Ok(permit) => {
                    self.counters.origin_calls.bump();
                    let started = self.clock.precise();
                    let called = {
                        let _panics = CountPanic(&self.counters.refresh_errors);
                        within_leader(leader.flight_id(), origin()).await
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
                        .publish(key, leader, result, delta.as_secs_f64(), found)
                        .await;
                    (shared, if panicked { "panicked" } else { outcome })
                }
                Err(refusal) => self.refuse(key, leader, refusal),
            };
            let span = tracing::Span::current();
            span.record("outcome", outcome);
            let elapsed = self.clock.precise().saturating_duration_since(asked);
            span.record("duration_ms", elapsed.as_secs_f64() * 1e3);
            shared
        };
        load.instrument(span).await
    }

    /// A permit of the cache's admission semaphore (none needed without one), or the error
    /// that stops this load: `Overloaded` past the queue timeout, or a closed gate's.
    async fn admit(&self) -> Result<Option<OwnedSemaphorePermit>, Error> {
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
    fn refuse(
        &self,
        key: K,
        leader: SharedLeader<K, V, E>,
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
    fn fall_back(&self, last: &Envelope<V>, now: Instant, generation: u64) -> Envelope<V> {
        self.counters.fallbacks.bump();
        self.counters.oldest_stale_served.record(last.age(now));
        let mut rearmed = last.rearm(now, self.policy.fail_safe_throttle());
        rearmed.generation = generation;
        rearmed
    }

    fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Stores a success (in the shared store under the fence its read returned, then in
    /// memory), or re-arms the last value when the fail-safe allows, then hands the
    /// outcome to the flight's waiters. Errors are never stored.
    async fn publish(
        &self,
        key: K,
        leader: SharedLeader<K, V, E>,
        result: Result<V, E>,
        delta: f64,
        mut found: Option<Found<V>>,
    ) -> (Result<V, E>, &'static str) {
        let now = self.clock.now();
        let generation = self.next_generation();
        let (shared, envelope, outcome) = match result {
            Ok(value) => {
                let envelope = Envelope::fill(
                    value.clone(),
                    now,
                    &self.policy,
                    delta,
                    generation,
                    fastrand::f64(),
                );
                (Ok(value), Some(envelope), "loaded")
            }
            Err(error) => {
                self.counters.refresh_errors.bump();
                let last = (self.fallback(&key, now))
                    .or_else(|| self.shared_fallback(found.as_mut(), now));
                match last {
                    Some(last) => {
                        let rearmed = self.fall_back(&last, now, generation);
                        (Ok(last.value), Some(rearmed), "fallback")
                    }
                    None => (Err(error), None, "failed"),
                }
            }
        };
        let envelope = match envelope {
            Some(envelope) => self.write_shared(&key, found.as_ref(), envelope, now).await,
            None => None,
        };
        (self.settle(leader, shared, envelope), outcome)
    }

    /// Stores `envelope` (unless an invalidation fenced the load out meanwhile) and hands
    /// `shared` to the flight's waiters.
    fn settle(
        &self,
        leader: SharedLeader<K, V, E>,
        shared: Result<V, E>,
        envelope: Option<Envelope<V>>,
    ) -> Result<V, E> {
        let store = |key| {
            if let Some(envelope) = envelope {
                self.store.insert(key, envelope);
            }
        };
        leader.settle(shared.clone(), store);
        shared
    }

    /// This cache's side of the shared store, connected on first use inside a Tokio
    /// runtime; `None` for the memory backend and `local` caches. The notice listener
    /// subscribes here, before the first read.
    fn tier(&self) -> Option<&Arc<Tier<K, V>>> {
        let side = self.shared.as_ref()?;
        if let Some(tier) = side.tier.get() {
            return tier.as_ref();
        }
        // Outside Tokio the store cannot run: memory only, until a load inside one.
        let tokio = tokio::runtime::Handle::try_current().ok()?;
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
            ));
            drop(tokio.spawn(listen(self.me.clone(), events)));
            Some(tier)
        });
        tier.as_ref()
    }

    /// What the shared store holds for `key`, counted.
    async fn find_shared(&self, key: &K) -> Option<Found<V>> {
        let tier = self.tier()?;
        let found = tier
            .find(key, self.clock.now(), self.next_generation())
            .await?;
        let now = self.clock.now();
        match (&found.read, &found.envelope) {
            (None, _) => self.counters.backend_errors.bump(),
            (Some(_), Some(stored)) if stored.state(now) == State::Fresh => {
                self.counters.shared_hits.bump();
            }
            (Some(_), _) => self.counters.shared_misses.bump(),
        }
        Some(found)
    }

    /// Publishes a new value to the shared store (a fallback stays local), and returns
    /// what memory keeps of it: everything on the memory backend; on a shared one, a
    /// tiered copy, or the value loaded while the store was unreachable (degraded); nothing
    /// when the store refused it because an invalidation raised the fence meanwhile.
    async fn write_shared(
        &self,
        key: &K,
        found: Option<&Found<V>>,
        envelope: Envelope<V>,
        now: Instant,
    ) -> Option<Envelope<V>> {
        if let (Some(tier), Some(found)) = (self.tier(), found) {
            if let (Some(read), false) = (&found.read, envelope.rearmed) {
                if !tier.publish(&found.key, read, &envelope, now).await {
                    return None;
                }
            }
        }
        self.memory_copy(key, found, envelope)
    }

    /// What memory keeps of a value on this cache's backend (see [`Inner::write_shared`]).
    fn memory_copy(
        &self,
        key: &K,
        found: Option<&Found<V>>,
        envelope: Envelope<V>,
    ) -> Option<Envelope<V>> {
        let (Some(tier), Some(found)) = (self.tier(), found) else {
            return Some(envelope);
        };
        let degraded = found.read.is_none();
        if !(tier.keeps_memory || degraded) {
            return None;
        }
        tier.copied(&found.key, key);
        Some(envelope)
    }

    /// The value the shared store held, when `stale_if_error` lets it stand in for a
    /// failing origin (the redis backend keeps no memory to fall back on).
    fn shared_fallback(&self, found: Option<&mut Found<V>>, now: Instant) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        found?.envelope.take().filter(|last| now < last.keep_until)
    }

    /// The shared side of [`Cache::invalidate`].
    async fn invalidate_shared(&self, key: &K) -> Result<(), Error> {
        if self.shared.is_none() {
            return Ok(());
        }
        let backend = |message: String| Error::Backend {
            cache: self.policy.name().clone(),
            message,
        };
        let Some(tier) = self.tier() else {
            return Err(backend(
                "no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into(),
            ));
        };
        let entry = tier.entry_key(key).map_err(|error| {
            backend(format!("the key cannot be written for the shared store ({error}); applied in this process only"))
        })?;
        tier.noticed(entry.value());
        tier.remote.invalidate(entry).await.map_err(|error| {
            backend(format!("{error}; applied in this process and queued, to be replayed before this replica reads the shared store again"))
        })
    }

    /// The last value, when `stale_if_error` lets it stand in for a failing origin.
    fn fallback(&self, key: &K, now: Instant) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        self.store.get(key).filter(|last| now < last.keep_until)
    }

    /// Bounds a miss by the policy's deadline. A caller whose deadline passes gets the
    /// fail-safe value if there is one, else [`Error::Timeout`]; in detached mode the load
    /// goes on without it.
    fn within_deadline<'a, M>(
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
    fn past_deadline(&self, key: &K, limit: Duration) -> Result<V, E> {
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

/// What joining a flight came to.
enum Turn<K: Hash + Eq + Clone, V: Clone, E: Clone> {
    Lead(SharedLeader<K, V, E>),
    Answered(Result<V, E>),
}

/// What an origin call came to: its result, or a panic a detached flight caught.
enum Called<V, E> {
    Returned(Result<V, E>),
    Panicked,
}

impl<K, V, E> Observed for Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    fn name(&self) -> &Arc<str> {
        self.policy.name()
    }

    fn stats(&self) -> Stats {
        self.counters.snapshot(self.flights.len())
    }
}

/// Runs a detached flight: admission, the origin with its panic caught and shared as an
/// error, then publishing. Owns everything, so it can be its own task.
async fn run_detached<K, V, E, F, Fut>(
    inner: Arc<Inner<K, V, E>>,
    key: K,
    leader: SharedLeader<K, V, E>,
    origin: F,
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
    inner.lead(key, leader, origin).await
}

tokio::task_local! {
    /// The flights whose origin the current task is running, innermost last.
    static LEADING: Vec<usize>;
}

/// Whether the current task runs the origin of flight `id` (directly or further out).
fn leads(id: usize) -> bool {
    LEADING
        .try_with(|leading| leading.contains(&id))
        .unwrap_or(false)
}

/// A task started on the caller's behalf keeps what the caller had: the flights it leads,
/// and its tracing span, so the load and the origin's own events stay inside the request.
fn inherit<T: Future>(task: T) -> impl Future<Output = T::Output> {
    let leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    LEADING.scope(leading, task.instrument(tracing::Span::current()))
}

/// Runs an origin as the leader of flight `id`.
fn within_leader<T: Future>(id: usize, origin: T) -> impl Future<Output = T::Output> {
    let mut leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    leading.push(id);
    LEADING.scope(leading, origin)
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

/// An origin that receives the key, as one that does not: the key is cloned here, on a
/// miss or refresh, never on a hit.
fn bind<K: Clone, F, Fut>(origin: F, key: &K) -> impl FnOnce() -> Fut
where
    F: FnOnce(&K) -> Fut,
{
    let key = key.clone();
    move || origin(&key)
}

/// Runs `task` as its own Tokio task, or hands it back when there is no runtime to run it.
fn spawn<T>(task: T) -> Result<(), T>
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

/// Keeps a cache's memory copies in line with the shared store: a notice from another
/// replica drops the copy it names; a lost (or lagging) subscription drops every copy, and
/// so does subscribing again, since notices sent in between were missed.
async fn listen<K, V, E>(inner: Weak<Inner<K, V, E>>, mut events: broadcast::Receiver<StoreEvent>)
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    loop {
        let event = events.recv().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(tier) = inner.tier() else {
            return;
        };
        match event {
            Ok(StoreEvent::Notice(notice)) => {
                if notice.own {
                    continue;
                }
                if let Some(key) = tier.noticed(&notice.key) {
                    inner.store.invalidate(&key);
                }
            }
            Ok(StoreEvent::SubscriptionLost | StoreEvent::Subscribed)
            | Err(RecvError::Lagged(_)) => {
                tier.forget_copies();
                inner.store.invalidate_all();
            }
            Err(RecvError::Closed) => return,
        }
    }
}
