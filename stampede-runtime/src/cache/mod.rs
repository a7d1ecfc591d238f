//! The cache: its public API and the path of one call.
//!
//! - `mod.rs`: [`Cache`], [`CacheBuilder`], and the fields of the one `Inner` a cache's
//!   handles share.
//! - `lookup.rs`: the public loads and the synchronous hit path (a lookup and a timestamp
//!   compare), and the caller's deadline.
//! - `load.rs`: everything after a lookup that found no plain fresh hit, the steps of a
//!   load in order (join the flight, memory, the shared store and its lease, admission,
//!   the origin, the fenced publish, settling and waking the waiters), with steps 6 and
//!   7's answer (what a load answers and stores) and settling the flight;
//! - `copies.rs`: what memory keeps of a shared value, and for how long;
//!   `marks.rs`: source versions, read from values, and the marks that refuse an older
//!   one; `tagging.rs`: the versions of an entry's tags, checked before it is stored
//!   (with the publish, step 6's writes), and a tag of this cache alone.
//! - `leader.rs`: the two leader modes, as types the load is generic over: detached (the
//!   leader's steps are a task of their own) and inline (in the leading caller, with
//!   takeover).
//! - `shared.rs`: each step's part on the shared store (the read and the lease, and the
//!   decision step 3 returns; publishing, what memory keeps); `lease_wait.rs`: a miss's
//!   wait for the replica that holds the key's lease; `notices.rs`: what another
//!   replica's notice does to this cache.
//! - `write.rs`: writes a caller asks for (insert, a forced refresh, invalidations);
//!   `blocking.rs`: loads for callers that are threads; `batch/`: many keys in one
//!   call, each an ordinary load whose origin joins the batch's one origin call.
mod batch;
mod blocking;
mod copies;
use copies::new_memory;
mod leader;
mod lease_wait;
mod load;
mod lookup;
mod marks;
mod notices;
mod shared;
mod tagging;
mod write;

pub use batch::Batcher;
pub(crate) use leader::{boxed, Detached, Inline};
pub use lookup::{Lookup, Unanswered};
pub use marks::VersionOf;

use crate::admission::{group_hash, Gate};
use crate::bounds::{CacheError, CacheKey, LocalValue, SourceVersion};
use crate::clock::{Clock, Instant};
use crate::envelope::{Envelope, State};
use crate::error::Error;
use crate::flight::{Flights, Leader};
use crate::hot_keys::{HotKey, HotKeys};
use crate::memory::Memory;
use crate::negative::KnownErrors;
use crate::policy::Policy;
use crate::runtime::Runtime;
use crate::shared::tier::{Codec, Tier};
use crate::stats::{Counters, Observed, Stats};
use crate::tags::TagBook;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use tagging::{Tagging, TagsOf};

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
    source_version: Option<VersionOf<V>>,
    tags: Option<TagsOf<K, V>>,
    admission_group: Option<GroupOf<K>>,
    types: PhantomData<fn() -> (K, V)>,
}

/// A key's group for its admission's `per_group` share, hashed.
pub(crate) type GroupOf<K> = Arc<dyn Fn(&K) -> u64 + Send + Sync>;

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
            source_version: None,
            tags: None,
            admission_group: None,
            types: PhantomData,
        }
    }

    /// The key group each load belongs to for its admission's `per_group` share (a
    /// tenant, a shard, a dependency): with `per_group = N` on the admission, the loads
    /// of one group hold at most N of its permits at once, so one tenant's cold start
    /// cannot take every permit from the others. Groups are compared by their hash (the
    /// same value gives the same group in every cache of the process); without
    /// `per_group` on the admission the group changes nothing.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stampede_runtime::{Cache, Policy, Runtime};
    /// let runtime = Runtime::builder()
    ///     .admission("db", 40, Duration::from_millis(500))
    ///     .admission_per_group("db", 10)
    ///     .build()
    ///     .unwrap();
    /// let policy = Policy::builder("profiles").fresh(Duration::from_secs(60)).admission("db").build().unwrap();
    /// // Keyed by (tenant, user): each tenant's loads hold at most 10 of the 40 permits.
    /// let profiles: Cache<(u64, u64), String> = Cache::builder(policy)
    ///     .runtime(&runtime)
    ///     .admission_group(|&(tenant, _): &(u64, u64)| tenant)
    ///     .build();
    /// ```
    pub fn admission_group<G: Hash>(
        mut self,
        group: impl Fn(&K) -> G + Send + Sync + 'static,
    ) -> Self {
        self.admission_group = Some(Arc::new(move |key: &K| group_hash(&group(key))));
        self
    }

    /// [`CacheBuilder::admission_group`] as the attribute gives it: the key's group,
    /// hashed already (with the same hasher).
    pub(crate) fn admission_group_of(mut self, group: Option<fn(&K) -> u64>) -> Self {
        if let Some(group) = group {
            self.admission_group = Some(Arc::new(group));
        }
        self
    }

    /// Reads the version of the source each loaded value was read at (a row's version
    /// column, an outbox sequence, a log offset), so [`Cache::invalidate_at`] can tell a
    /// late invalidation from a new one, and a value read before an invalidation (from a
    /// lagging read replica, say) is not stored after it. Versions must grow with every
    /// change of the source; on Redis they are compared exactly up to `u64::MAX`.
    ///
    /// The function returns a `u64` or an `i64` (a `BIGINT` column). A negative `i64` is no
    /// version the store can order: that value is stored without one, as in a cache that
    /// reads none, and a warning names the cache (see [`SourceVersion`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Error, Policy};
    ///
    /// #[derive(Clone, serde::Serialize, serde::Deserialize)]
    /// struct Row { name: String, version: i64 }
    ///
    /// let policy = Policy::builder("rows").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Row> = Cache::builder(policy)
    ///     .source_version(|row: &Row| row.version)
    ///     .build();
    /// ```
    ///
    /// [`SourceVersion`]: crate::SourceVersion
    pub fn source_version<N: SourceVersion>(
        mut self,
        version: impl Fn(&V) -> N + Send + Sync + 'static,
    ) -> Self {
        self.source_version = Some(VersionOf::new(version));
        self
    }

    /// [`CacheBuilder::source_version`] as the attribute reads it.
    pub(crate) fn source_version_of(mut self, version: Option<VersionOf<V>>) -> Self {
        self.source_version = version;
        self
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
    ///
    /// Longer than a screen: it assembles every part of `Inner` in one place (policy with
    /// overrides, runtime, memory, the shared side, tags, batches), so what a cache is made
    /// of is read once.
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
                runtime
                    .backend()
                    .keeps_memory()
                    .map(|keeps_memory| SharedSide {
                        runtime: runtime.clone(),
                        codec,
                        keeps_memory,
                        tier: OnceLock::new(),
                    })
            }
            _ => None,
        };
        let known_errors = (policy.error_ttl()).map(|ttl| KnownErrors::new(policy.capacity(), ttl));
        let (book, tag_runtime) = match &runtime {
            Ok(runtime) => (runtime.tag_book().clone(), Some(runtime.clone())),
            Err(_) => (TagBook::new(false), None),
        };
        if let (Some(_), Some(lifetime)) = (&self.tags, crate::memory::lifetime(&policy, true)) {
            book.keep_at_least(lifetime);
        }
        let tags = Tagging {
            of: self.tags,
            book,
            scope: policy.name().clone(),
            runtime: tag_runtime,
        };
        let inner = Arc::new_cyclic(|me| Inner {
            memory: new_memory(&policy, clock.is_real_time(), shared.is_some(), me),
            known_errors,
            hot: HotKeys::new(policy.hot_keys()),
            policy,
            gate,
            clock,
            flights: Arc::new(Flights::new()),
            counters: Counters::default(),
            generation: AtomicU64::new(0),
            map_error: self.map_error,
            shared,
            source_version: self.source_version,
            tags,
            admission_group: self.admission_group,
            marks: OnceLock::new(),
            errors_heard: AtomicU64::new(0),
            me: me.clone(),
            batches: Default::default(),
        });
        if let Ok(runtime) = runtime {
            let observed: Weak<dyn Observed> = Arc::downgrade(&inner) as Weak<_>;
            runtime.register(observed);
        }
        Cache { inner }
    }
}

pub(crate) struct Inner<K, V, E> {
    policy: Policy,
    gate: Gate,
    clock: Clock,
    memory: Memory<K, V>,
    /// Errors kept by negative caching (`cache_errors`), when the policy asks for it.
    known_errors: Option<KnownErrors<K, E>>,
    flights: Arc<Flights<K, Result<V, E>>>,
    counters: Counters,
    /// The keys with the most misses and origin calls.
    hot: HotKeys<K>,
    generation: AtomicU64,
    map_error: fn(Error) -> E,
    /// The shared store, for a cache that may go there on a runtime that has one.
    shared: Option<SharedSide<K, V>>,
    source_version: Option<VersionOf<V>>,
    /// The cache's tags, if it has any, and where its own tag invalidations go (see
    /// `tags.rs`).
    tags: Tagging<K, V>,
    /// The key group of a load, for its admission's `per_group` share.
    admission_group: Option<GroupOf<K>>,
    /// The tag book's count of moves when kept errors were last looked at.
    errors_heard: AtomicU64,
    /// In memory only (the shared store keeps its own): the highest source version
    /// invalidated per key, kept as long as the shared store keeps its marks. Keyed as
    /// any type: one table type for every cache (see `any_key`).
    marks: OnceLock<moka::sync::Cache<crate::any_key::AnyKey, u64>>,
    /// Itself, for the notice listener it starts.
    me: Weak<Inner<K, V, E>>,
    /// The batch origins calls share, by group (a `batch` function's other arguments):
    /// see `batch/`.
    batches: std::sync::Mutex<batch::Groups>,
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

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
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

    /// A cache kept in this process's memory whatever the runtime's backend, for key and
    /// value types serde cannot write (the attribute's `local`); callers receive framework
    /// failures as `E::from(stampede::Error)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Error, Policy};
    ///
    /// // No serde: a handle to something that only lives here.
    /// #[derive(Clone)]
    /// struct Connection(std::sync::Arc<str>);
    ///
    /// let policy = Policy::builder("connections").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Connection, Error> = Cache::local(policy);
    /// ```
    pub fn local(policy: Policy) -> Self
    where
        E: From<Error>,
    {
        CacheBuilder::new(policy, E::from).build()
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
    /// where its runtime's backend says; [`CacheBuilder::local`] keeps it in memory.
    /// Every builder is local until [`CacheBuilder::shared`], which needs serde: this one
    /// is `CacheBuilder::new(policy, E::from).shared()`, and [`CacheBuilder::new`] builds
    /// caches of types serde cannot write.
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

    /// The key group a load of `key` takes its admission's `per_group` share in (as a
    /// hash: equal for one group), if the cache has groups
    /// ([`CacheBuilder::admission_group`], `admission_group = ...` on the attribute).
    pub fn admission_group(&self, key: &K) -> Option<u64> {
        self.inner.admission_group.as_ref().map(|group| group(key))
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The keys that cost the origin most: up to [`Policy::hot_keys`] of them (32 by
    /// default), most origin calls first, then most misses. Counted from a bounded
    /// top-K of the misses and origin calls (see [`HotKey`] for what is exact and what
    /// is estimated); the fresh hit pays for none of it but a sampled branch.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("prices").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, u64> = Cache::new(policy);
    /// cache.load(7, || async { Ok(70) }).await.unwrap();
    /// let hottest = &cache.hot_keys()[0];
    /// assert_eq!((hottest.key, hottest.misses, hottest.origin_calls), (7, 1, 1));
    /// # }
    /// ```
    pub fn hot_keys(&self) -> Vec<HotKey<K>> {
        self.inner.hot.top()
    }

    /// The limit of the admission semaphore this cache's loads go through, if any.
    pub(crate) fn admission_limit(&self) -> Option<usize> {
        self.inner.gate.limit()
    }

    /// The value cached for `key` if it may still be served (fresh or stale), without
    /// loading or counting.
    pub fn peek(&self, key: &K) -> Option<V> {
        let envelope = self.inner.memory.get(key)?;
        (envelope.state(self.inner.clock.now()) != State::Expired).then(|| envelope.value.clone())
    }
}

/// The leader of one load of a cache, its flight carrying the load's answer.
pub(crate) type LoadLeader<K, V, E> = Leader<K, Result<V, E>>;

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    fn fail(&self, error: Error) -> E {
        (self.map_error)(error)
    }

    /// The error negative caching keeps for `key`, if any is still served.
    fn known_error(&self, key: &K) -> Option<E> {
        let known = self.known_errors.as_ref()?;
        if self.tags.of.is_some() {
            // A kept error carries no tags: any tag's move drops them all, as an
            // invalidation of its key would.
            let moves = self.tags.book.moves();
            if self.errors_heard.swap(moves, Ordering::AcqRel) != moves {
                known.clear();
            }
        }
        let error = known.get(key, self.clock.now())?;
        self.counters.error_hits.bump();
        Some(error)
    }

    fn forget_error(&self, key: &K) {
        if let Some(known) = &self.known_errors {
            known.remove(key);
        }
    }

    fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The last value memory holds, when `stale_if_error` lets it stand in for a failing
    /// origin.
    fn last_good(&self, key: &K, now: Instant) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        self.memory.get(key).filter(|last| now < last.keep_until)
    }
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
        self.counters
            .snapshot(self.flights.len(), self.memory.entry_count())
    }
}

#[cfg(test)]
mod tests;
