//! Batch loads: many keys in one call, one origin call for the keys nobody has.
//!
//! Each key of a batch is an ordinary load of its own (its lookup, its flight, its lease
//! on a shared store, its fences, its deadline, its stale and fail-safe windows), whose
//! origin, instead of loading the key, hands it to the batch's [`Gather`] and waits. The
//! gather asks the batch origin once for every key handed to it:
//!
//! ```text
//! each key:  lookup -> fresh: answered, never asked for
//!                   -> a load: join the key's flight (another batch's or a single-key
//!                      call's: its answer), the shared store (a value, or another
//!                      replica's lease: wait for it), else the key's origin -> gather
//! gather:    every key of the call answered, handed over, or parked (waiting on a
//!            load elsewhere: a flight, another replica's lease, an admission permit)
//!            -> one origin call for the keys handed over (chunks of `max_batch`)
//! late keys: handed over after that (a refresh of a stale key, a parked load that
//!            loads itself after all, a single-key call through a `Batcher`) wait out
//!            `batch_window` from the first of them, then go together
//! running:   while an origin call of the gather runs, keys due wait `batch_window` for
//!            more and go together (bounded: an origin that waits for more keys of its
//!            own batch never waits for itself), unless `max_batch` of them wait
//! ```
//!
//! Parking is heard through [`parked`], which the load's waiting steps call while the
//! batch polls that key's load (`Tracked`).
//!
//! A key the origin's map leaves out is *not found*: its load answers `None`, stored like
//! any value (`cache_if(Option::is_some)` keeps it out), so a hot missing id costs one
//! origin call per `fresh`. An origin error fails only the keys of its chunk, and each of
//! those loads treats it as its own failure (its stale value under `stale_if_error`).
use super::leader::{boxed, Detached};
use super::{Cache, Lookup, Unanswered};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::error::Error;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// Returns the value of every key of `keys` that has one, loading those nobody has in
    /// one call of `origin`, which returns the values it found by key.
    ///
    /// Each key is an entry of its own, loaded as [`Cache::load`] would: fresh keys are
    /// answered from the cache; a key already loading (in another batch, or a single-key
    /// call of this cache; on a shared store, under another replica's lease) is joined;
    /// only the rest go to `origin`, together, in calls of at most
    /// [`Policy::max_batch`](crate::Policy::max_batch) keys. A key `origin` leaves out of
    /// its map is not found: absent from the answer, and kept as `None` like any value
    /// (unless the policy's `cache_if` refuses `None`), so it is not asked for again until
    /// it expires. Like [`Cache::load`], the origin outlives its callers.
    ///
    /// Counters are per key: [`Stats::origin_calls`](crate::Stats::origin_calls) counts
    /// the keys loaded, not the calls of `origin`.
    ///
    /// An error of `origin` fails the keys of that call only; the answer is the first
    /// error of any requested key (after each key's `stale_if_error`), else every value.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("price").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Option<u64>> = Cache::new(policy);
    /// let prices = |ids: Vec<u64>| async move {
    ///     // One query for every id nobody has: `where id = any($1)`. Id 3 is not there.
    ///     Ok(ids.into_iter().filter(|id| *id != 3).map(|id| (id, id * 100)).collect())
    /// };
    /// let found = cache.load_many([1, 2, 3], prices).await.unwrap();
    /// assert_eq!(found, HashMap::from([(1, 100), (2, 200)]));
    /// // 1 and 2 are cached, and 3 is known to be missing: only 4 is asked for.
    /// let found = cache.load_many([1, 3, 4], prices).await.unwrap();
    /// assert_eq!(found.len(), 2);
    /// // Origin calls are counted per key loaded: 1, 2 and 3, then 4.
    /// assert_eq!(cache.stats().origin_calls, 4);
    /// # }
    /// ```
    pub async fn load_many<I, F, Fut>(&self, keys: I, origin: F) -> Result<HashMap<K, V>, E>
    where
        I: IntoIterator<Item = K>,
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let (found, loads) = self.looked_up(keys);
        let inner = &self.inner;
        let gather = Gather::new(
            origin,
            inner.policy.max_batch(),
            inner.policy.batch_window(),
            inner.map_error,
            inner.policy.name().clone(),
        );
        self.load_through(&gather, found, loads).await
    }

    /// Each key once: fresh values at once (absent ones need nothing), the rest to load.
    #[allow(clippy::type_complexity)]
    fn looked_up(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> (HashMap<K, V>, Vec<(K, Unanswered<Option<V>>)>) {
        let mut found = HashMap::new();
        let mut loads = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            if !seen.insert(key.clone()) {
                continue;
            }
            match self.lookup(&key) {
                Lookup::Fresh(Some(value)) => {
                    found.insert(key, value);
                }
                Lookup::Fresh(None) => {}
                Lookup::Load(unanswered) => loads.push((key, unanswered)),
            }
        }
        (found, loads)
    }

    /// The keys of one call that need a load (`loads`, beside those `found` fresh), each
    /// loaded with an origin that hands the key to `gather`.
    async fn load_through<F>(
        &self,
        gather: &Arc<Gather<K, V, E, F>>,
        mut found: HashMap<K, V>,
        loads: Vec<(K, Unanswered<Option<V>>)>,
    ) -> Result<HashMap<K, V>, E>
    where
        F: Origin<K, V, E>,
    {
        if loads.is_empty() {
            return Ok(found);
        }
        let call = Arc::new(Call(std::sync::atomic::AtomicUsize::new(loads.len())));
        let mut running: FuturesUnordered<_> = loads
            .into_iter()
            .map(|(key, unanswered)| {
                let ticket = Ticket::of(&call);
                let origin = gather.clone().origin_of(ticket.clone());
                let load =
                    self.load_found::<Detached, _, _>(key.clone(), unanswered, boxed(origin));
                let gather: Arc<dyn Park> = gather.clone();
                let load = Tracked {
                    load: Box::pin(load),
                    key: (gather, ticket),
                    done: false,
                };
                async move { (key, load.await) }
            })
            .collect();
        let mut failed = None;
        while let Some((key, answer)) = running.next().await {
            // Without a runtime, the origin calls that no task can run are run here.
            while let Some(asked) = gather.stashed() {
                gather.call(asked).await;
            }
            match answer {
                Ok(Some(value)) => {
                    found.insert(key, value);
                }
                Ok(None) => {}
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(found),
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// A door for single keys onto a batch origin (the DataLoader pattern): concurrent
    /// [`Batcher::load`]s that miss within the policy's
    /// [`batch_window`](crate::Policy::batch_window) (from the first of them) go to
    /// `origin` together, so 50 tasks asking for 50 ids cost one origin call. Each key is
    /// still a load of its own, joined, fenced and kept as [`Cache::load_many`] keeps it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("price").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Option<u64>> = Cache::new(policy);
    /// let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    /// let counted = calls.clone();
    /// let price = cache.batcher(move |ids: Vec<u64>| {
    ///     counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ///     async move { Ok(ids.into_iter().map(|id| (id, id * 100)).collect()) }
    /// });
    /// let (one, two) = tokio::join!(price.load(1), price.load(2));
    /// assert_eq!((one.unwrap(), two.unwrap()), (Some(100), Some(200)));
    /// assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    /// # }
    /// ```
    pub fn batcher<F, Fut>(&self, origin: F) -> Batcher<K, V, E, F>
    where
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let inner = &self.inner;
        Batcher {
            cache: self.clone(),
            // No keys of its own to wait for: every key is a late one.
            gather: Gather::new(
                origin,
                inner.policy.max_batch(),
                inner.policy.batch_window(),
                inner.map_error,
                inner.policy.name().clone(),
            ),
        }
    }
}

/// The gathers of one cache that calls share, by group, each held while a batcher of it
/// lives.
pub(super) type Groups =
    HashMap<crate::any_key::AnyKey, std::sync::Weak<dyn std::any::Any + Send + Sync>>;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// The batcher of `group` (for a `batch` function: its other keyed arguments), made
    /// with `make`'s origin unless one of the group is in use: calls of a group share
    /// their origin calls, and single keys gather with them.
    #[doc(hidden)]
    pub fn batcher_for<G, F, Fut>(&self, group: G, make: impl FnOnce() -> F) -> Batcher<K, V, E, F>
    where
        G: std::hash::Hash + Eq + Send + Sync + 'static,
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let mut groups = self.inner.batches.lock().unwrap_or_else(|e| e.into_inner());
        let group = crate::any_key::AnyKey::new(group);
        let running = groups
            .get(&group)
            .and_then(std::sync::Weak::upgrade)
            .and_then(|gather| gather.downcast::<Gather<K, V, E, F>>().ok());
        let gather = match running {
            Some(gather) => gather,
            None => {
                let inner = &self.inner;
                let gather = Gather::new(
                    make(),
                    inner.policy.max_batch(),
                    inner.policy.batch_window(),
                    inner.map_error,
                    inner.policy.name().clone(),
                );
                // Groups no call uses any more go when another arrives.
                groups.retain(|_, gather| gather.strong_count() > 0);
                let shared: Arc<dyn std::any::Any + Send + Sync> = gather.clone();
                groups.insert(group, Arc::downgrade(&shared));
                gather
            }
        };
        Batcher {
            cache: self.clone(),
            gather,
        }
    }
}

/// Single-key loads that share origin calls: see [`Cache::batcher`].
pub struct Batcher<K, V, E, F> {
    cache: Cache<K, Option<V>, E>,
    gather: Arc<Gather<K, V, E, F>>,
}

impl<K, V, E, F, Fut> Batcher<K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
{
    /// [`Cache::load_many`] through this batcher's origin: the keys nobody has share origin
    /// calls with the other calls through it. Keys due while one of its origin calls runs
    /// wait up to the batch window for more, so a busy origin gets fewer, larger calls.
    pub async fn load_many(&self, keys: impl IntoIterator<Item = K>) -> Result<HashMap<K, V>, E> {
        let (found, loads) = self.cache.looked_up(keys);
        self.cache.load_through(&self.gather, found, loads).await
    }

    /// `key`'s value (`None`: the origin did not find it), loaded, when nothing servable
    /// is cached, in one origin call with the other keys asked for within the window.
    pub async fn load(&self, key: K) -> Result<Option<V>, E> {
        match self.cache.lookup(&key) {
            Lookup::Fresh(value) => Ok(value),
            Lookup::Load(unanswered) => {
                let origin = self.gather.clone().origin_of(Ticket::single());
                self.cache
                    .load_found::<Detached, _, _>(key, unanswered, boxed(origin))
                    .await
            }
        }
    }
}

impl<K, V, E, F> std::fmt::Debug for Batcher<K, V, E, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// Keys on their way to one batch origin: the pool they are handed to, and the origin
/// calls that take them. One per `load_many` call, or one per [`Batcher`], shared by its
/// calls.
struct Gather<K, V, E, F> {
    /// Itself, for the origin calls a settling key starts.
    me: std::sync::Weak<Self>,
    origin: F,
    max_batch: usize,
    window: Duration,
    map_error: fn(Error) -> E,
    cache: Arc<str>,
    pool: Mutex<Pool<K, V, E>>,
}

struct Pool<K, V, E> {
    /// Keys handed over, each with where its answer goes.
    asked: Vec<Asked<K, V, E>>,
    /// Origin calls running: keys due meanwhile wait a window for more, so a busy origin
    /// gets fewer, larger calls.
    in_flight: usize,
    /// A key waits out the window for others to join it.
    window_open: bool,
    /// Origin calls due without a runtime to run them in a task.
    stashed: Vec<Vec<Asked<K, V, E>>>,
}

/// The keys of one `load_many` call still on their way: neither answered, nor handed
/// over, nor parked (waiting on something else).
struct Call(std::sync::atomic::AtomicUsize);

/// Where one key stands, for its call's count of keys still on their way.
#[derive(Clone)]
struct Ticket {
    state: Arc<AtomicU8>,
    /// The call the key belongs to; none for a single key (a `Batcher::load`).
    call: Option<Arc<Call>>,
}

const ON_ITS_WAY: u8 = 0;
/// Waiting on something outside the call: another load of the key (here, or another
/// replica's under its lease), or an admission permit.
const PARKED: u8 = 1;
/// Answered, or handed over.
const SETTLED: u8 = 2;

impl Ticket {
    fn of(call: &Arc<Call>) -> Self {
        Ticket {
            state: Arc::new(AtomicU8::new(ON_ITS_WAY)),
            call: Some(call.clone()),
        }
    }

    /// A key that is no call's: it only ever hands itself over late.
    fn single() -> Self {
        Ticket {
            state: Arc::new(AtomicU8::new(SETTLED)),
            call: None,
        }
    }

    /// Moves the key to `to`; whether that made it the last of its call on its way.
    fn advance(&self, to: u8) -> bool {
        let was = self.state.fetch_max(to, Ordering::AcqRel);
        let Some(call) = &self.call else { return false };
        was == ON_ITS_WAY && to > ON_ITS_WAY && call.0.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Whether the key hands itself over while its call still waits for it.
    fn on_its_way(&self) -> bool {
        self.state.load(Ordering::Acquire) == ON_ITS_WAY
    }
}

/// A batch origin as the gather calls it: the keys asked for in, the values found by key
/// out. Every `Fn(Vec<K>) -> impl Future<Output = Result<HashMap<K, V>, E>>` is one.
trait Origin<K, V, E>: Send + Sync + 'static {
    type Called: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static;
    fn call(&self, keys: Vec<K>) -> Self::Called;
}

impl<K, V, E, F, Fut> Origin<K, V, E> for F
where
    F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
{
    type Called = Fut;
    fn call(&self, keys: Vec<K>) -> Fut {
        self(keys)
    }
}

/// One key's answer from the batch.
type Answer<V, E> = std::pin::Pin<Box<dyn Future<Output = Result<Option<V>, E>> + Send>>;

/// A key handed over, and where its answer goes.
type Asked<K, V, E> = (K, oneshot::Sender<Result<Option<V>, E>>);

/// What the key that hands itself over does next.
enum Next<K, V, E> {
    /// Ask the origin for these keys now (this key among them).
    Ask(Vec<Asked<K, V, E>>),
    /// Wait out the window, then ask for whatever has been handed over.
    Window,
    /// Another key, a window, or the end of a running origin call will ask.
    Wait,
}

impl<K, V, E, F> Gather<K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Origin<K, V, E>,
{
    fn new(
        origin: F,
        max_batch: usize,
        window: Duration,
        map_error: fn(Error) -> E,
        cache: Arc<str>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Gather {
            me: me.clone(),
            origin,
            max_batch: max_batch.max(1),
            window,
            map_error,
            cache,
            pool: Mutex::new(Pool {
                asked: Vec::new(),
                in_flight: 0,
                window_open: false,
                stashed: Vec::new(),
            }),
        })
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool<K, V, E>> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The origin of one key's load: hand the key over, and answer what the batch's
    /// origin call says of it.
    fn origin_of(
        self: Arc<Self>,
        ticket: Ticket,
    ) -> impl FnOnce(&K) -> Answer<V, E> + Send + 'static {
        move |key: &K| {
            let key = key.clone();
            Box::pin(async move { self.ask(key, ticket).await })
        }
    }

    async fn ask(self: Arc<Self>, key: K, ticket: Ticket) -> Result<Option<V>, E> {
        let (answer, answered) = oneshot::channel();
        // Handed over while its call waits for it, or late: a refresh (of a stale value
        // the key was answered with), a load that waited elsewhere and now loads itself,
        // a single key. A late key waits out a window, so that keys which fall due
        // together are asked for together.
        let during_call = ticket.on_its_way();
        let last = ticket.advance(SETTLED);
        let next = {
            let mut pool = self.pool();
            pool.asked.push((key, answer));
            if last || pool.asked.len() >= self.max_batch {
                match self.due(&mut pool) {
                    Some(asked) => Next::Ask(asked),
                    None => Next::Wait,
                }
            } else if during_call || pool.window_open {
                Next::Wait
            } else {
                pool.window_open = true;
                Next::Window
            }
        };
        match next {
            Next::Ask(asked) => self.call(asked).await,
            Next::Window => {
                // Without a runtime there is no timer, and the keys are answered in turn:
                // ask at once.
                if tokio::runtime::Handle::try_current().is_ok() {
                    tokio::time::sleep(self.window).await;
                }
                let asked = self.window_closed();
                self.call(asked).await
            }
            Next::Wait => {}
        }
        // The key's answer, from whichever origin call asked for it. A call that
        // panicked dropped its senders.
        answered.await.unwrap_or_else(|_| {
            Err((self.map_error)(Error::OriginPanicked {
                cache: self.cache.clone(),
            }))
        })
    }

    /// The keys handed over are due: asked for now (counted in `in_flight`), unless an
    /// origin call is running. Then they wait `batch_window` for more (a window this opens
    /// if none is open), so that callers arriving while the origin is busy share a call;
    /// the wait is bounded, so an origin that itself waits for more keys of its own batch
    /// (a tree, level by level, even from another task) never waits for itself.
    fn due(&self, pool: &mut Pool<K, V, E>) -> Option<Vec<Asked<K, V, E>>> {
        if pool.asked.is_empty() {
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current();
        if let (true, Ok(runtime), Some(me)) = (
            pool.in_flight > 0 && pool.asked.len() < self.max_batch,
            &runtime,
            self.me.upgrade(),
        ) {
            if !pool.window_open {
                pool.window_open = true;
                drop(runtime.spawn(async move {
                    tokio::time::sleep(me.window).await;
                    let asked = me.window_closed();
                    me.call(asked).await;
                }));
            }
            return None;
        }
        pool.in_flight += 1;
        Some(std::mem::take(&mut pool.asked))
    }

    /// A window ended: the keys it gathered, counted in `in_flight`.
    fn window_closed(&self) -> Vec<Asked<K, V, E>> {
        let mut pool = self.pool();
        pool.window_open = false;
        if pool.asked.is_empty() {
            return Vec::new();
        }
        pool.in_flight += 1;
        std::mem::take(&mut pool.asked)
    }

    /// `ticket`'s key moved to `to` (answered, or parked); if it was the last of its call
    /// on its way, the keys handed over are due: asked for in a task of their own (their
    /// loads outlive this caller), or, without a runtime, by the call's caller.
    fn settle(&self, ticket: &Ticket, to: u8) {
        if !ticket.advance(to) {
            return;
        }
        let due = self.due(&mut self.pool());
        if let Some(asked) = due {
            self.spawn(asked);
        }
    }

    fn spawn(&self, asked: Vec<Asked<K, V, E>>) {
        match (tokio::runtime::Handle::try_current(), self.me.upgrade()) {
            (Ok(runtime), Some(me)) => drop(runtime.spawn(async move { me.call(asked).await })),
            _ => self.pool().stashed.push(asked),
        }
    }

    /// An origin call no task could run.
    fn stashed(&self) -> Option<Vec<Asked<K, V, E>>> {
        self.pool().stashed.pop()
    }

    /// One origin call per chunk of `max_batch` keys, at once; each key's answer to its
    /// load. When they end, the keys handed over meanwhile are asked for.
    async fn call(&self, mut asked: Vec<Asked<K, V, E>>) {
        if asked.is_empty() {
            return;
        }
        // Counted in `in_flight` by `ready`; uncounted however this ends (a panicking
        // origin, a dropped caller), so that the pool never waits for a call that is gone.
        let mut running = Running {
            gather: self,
            counted: true,
        };
        loop {
            let mut calls = FuturesUnordered::new();
            while !asked.is_empty() {
                let rest = asked.split_off(asked.len().min(self.max_batch));
                let chunk = std::mem::replace(&mut asked, rest);
                let keys = chunk.iter().map(|(key, _)| key.clone()).collect();
                let called = self.origin.call(keys);
                calls.push(async move { (chunk, called.await) });
            }
            while let Some((chunk, result)) = calls.next().await {
                match result {
                    Ok(mut values) => {
                        for (key, answer) in chunk {
                            let _ = answer.send(Ok(values.remove(&key)));
                        }
                    }
                    Err(error) => {
                        for (_, answer) in chunk {
                            let _ = answer.send(Err(error.clone()));
                        }
                    }
                }
            }
            let mut pool = self.pool();
            pool.in_flight -= 1;
            running.counted = false;
            match self.due(&mut pool) {
                Some(next) => {
                    asked = next;
                    running.counted = true;
                }
                None => return,
            }
        }
    }
}

/// An origin call counted in its pool's `in_flight`.
struct Running<'a, K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Origin<K, V, E>,
{
    gather: &'a Gather<K, V, E, F>,
    counted: bool,
}

impl<K, V, E, F> Drop for Running<'_, K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Origin<K, V, E>,
{
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let gather = self.gather;
        let mut pool = gather.pool();
        pool.in_flight -= 1;
        // The keys that waited for this call go in a call of their own.
        let due = gather.due(&mut pool);
        drop(pool);
        if let Some(asked) = due {
            gather.spawn(asked);
        }
    }
}

/// What a key's load tells its gather: it starts to wait on something else, or it ended.
trait Park: Send + Sync {
    fn park(&self, ticket: &Ticket, to: u8);
}

impl<K, V, E, F> Park for Gather<K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Origin<K, V, E>,
{
    fn park(&self, ticket: &Ticket, to: u8) {
        self.settle(ticket, to);
    }
}

thread_local! {
    /// The batch key whose load this thread is polling, if any.
    static POLLING: RefCell<Option<(Arc<dyn Park>, Ticket)>> = const { RefCell::new(None) };
}

/// A key's load, polled with its batch key known to the steps that wait (see
/// [`parked`]). Its end settles the key; so does its drop unfinished (the call's caller
/// left, and the load goes on in a task where it is not heard): the gather must not wait
/// for what it can no longer hear from.
struct Tracked<L> {
    load: L,
    key: (Arc<dyn Park>, Ticket),
    done: bool,
}

impl<L: Future + Unpin> Future for Tracked<L> {
    type Output = L::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<L::Output> {
        let key = Some(self.key.clone());
        let outer = POLLING.with(|polling| polling.replace(key));
        let polled = Pin::new(&mut self.load).poll(cx);
        POLLING.with(|polling| polling.replace(outer));
        if polled.is_ready() {
            self.done = true;
            let (gather, ticket) = &self.key;
            gather.park(ticket, SETTLED);
        }
        polled
    }
}

impl<L> Drop for Tracked<L> {
    fn drop(&mut self) {
        if !self.done {
            let (gather, ticket) = &self.key;
            gather.park(ticket, PARKED);
        }
    }
}

/// A load is about to wait on something outside its batch: another load of its key (a
/// flight here, or another replica's lease), or an admission permit. Its batch stops
/// waiting for it before asking the origin for the keys handed over. Nothing outside a
/// batch key's poll.
pub(super) fn parked() {
    let polling = POLLING.with(|polling| polling.borrow().clone());
    if let Some((gather, ticket)) = polling {
        gather.park(&ticket, PARKED);
    }
}

#[cfg(test)]
mod tests;
