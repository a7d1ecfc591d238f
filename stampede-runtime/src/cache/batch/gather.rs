//! A batch's gather: the keys its loads hand over, and the origin calls that take them
//! (when each is due: see the module above).
use super::park::Park;
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::error::Error;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Keys on their way to one batch origin: the pool they are handed to, and the origin
/// calls that take them. One per `load_many` call, or one per [`Batcher`], shared by its
/// calls.
///
/// [`Batcher`]: super::Batcher
pub(super) struct Gather<K, V, E, F> {
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
pub(super) struct Call(pub(super) std::sync::atomic::AtomicUsize);

/// Where one key stands, for its call's count of keys still on their way.
#[derive(Clone)]
pub(super) struct Ticket {
    state: Arc<AtomicU8>,
    /// The call the key belongs to; none for a single key (a `Batcher::load`).
    call: Option<Arc<Call>>,
}

const ON_ITS_WAY: u8 = 0;
/// Waiting on something outside the call: another load of the key (here, or another
/// replica's under its lease), or an admission permit.
pub(super) const PARKED: u8 = 1;
/// Answered, or handed over.
pub(super) const SETTLED: u8 = 2;

impl Ticket {
    pub(super) fn of(call: &Arc<Call>) -> Self {
        Ticket {
            state: Arc::new(AtomicU8::new(ON_ITS_WAY)),
            call: Some(call.clone()),
        }
    }

    /// A key that is no call's: it only ever hands itself over late.
    pub(super) fn single() -> Self {
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
pub(super) trait Origin<K, V, E>: Send + Sync + 'static {
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
pub(super) type Answer<V, E> = std::pin::Pin<Box<dyn Future<Output = Result<Option<V>, E>> + Send>>;

/// A key handed over, and where its answer goes.
pub(super) type Asked<K, V, E> = (K, oneshot::Sender<Result<Option<V>, E>>);

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
    pub(super) fn new(
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
    pub(super) fn origin_of(
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
    fn advance(&self, ticket: &Ticket, to: u8) {
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
    pub(super) fn stashed(&self) -> Option<Vec<Asked<K, V, E>>> {
        self.pool().stashed.pop()
    }

    /// One origin call per chunk of `max_batch` keys, at once; each key's answer to its
    /// load. When they end, the keys handed over meanwhile are asked for: in a task of
    /// their own where there is a runtime, since this call may be running inside one
    /// key's load, which takes its answer only once this returns (asked for here, its
    /// value would be published, and counted fresh, only when the next call ended: seed
    /// 37036337 served a value past its policy by that much).
    pub(super) async fn call(&self, mut asked: Vec<Asked<K, V, E>>) {
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
            let next = {
                let mut pool = self.pool();
                pool.in_flight -= 1;
                running.counted = false;
                self.due(&mut pool)
            };
            match next {
                Some(next) if tokio::runtime::Handle::try_current().is_ok() => {
                    self.spawn(next);
                    return;
                }
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

impl<K, V, E, F> Park for Gather<K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Origin<K, V, E>,
{
    fn park(&self, ticket: &Ticket, to: u8) {
        self.advance(ticket, to);
    }
}
