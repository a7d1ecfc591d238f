//! The registry itself (see the module's documentation).
use super::sync::{Arc, Mutex, MutexGuard};
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;
use std::task::{Context, Poll, Waker};

/// The running loads of one cache, by key.
pub(crate) struct Flights<K, T> {
    registry: Mutex<Registry<K, T>>,
    /// One order for this cache's joins and its loads' reads of the shared store (see
    /// [`Flights::tick`]).
    ticks: AtomicU64,
}

struct Registry<K, T> {
    /// Raised by `invalidate_all`.
    epoch: u64,
    keys: HashMap<K, Loads<T>>,
    running: usize,
}

/// The loads of one key running now.
struct Loads<T> {
    /// Raised by `invalidate(key)`.
    fence: u64,
    running: usize,
    /// The flight new callers join; `None` once an invalidation detached it.
    flight: Option<Arc<Flight<T>>>,
}

/// The fences a load started under. The shared store's fenced publish compares the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ticket {
    epoch: u64,
    fence: u64,
}

/// What [`Flights::join`] made of the caller.
pub(crate) enum Join<K: Hash + Eq + Clone, T: Clone> {
    /// Nobody was loading the key: this caller must run the origin and settle.
    Leader(Leader<K, T>),
    /// Somebody is: await this for their outcome.
    Waiter(Waiter<T>),
}

/// What a waiter receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome<T> {
    Done(T),
    /// The leader was dropped without settling (cancelled or panicked): join again.
    Abandoned,
}

struct Flight<T> {
    /// Unique in the process, so a stale id can never name a later flight.
    id: u64,
    state: Mutex<FlightState<T>>,
    /// The load's span, once its leader opened one: waiters link theirs to it. Held here,
    /// it stays open until the last waiter has linked.
    span: std::sync::OnceLock<tracing::Span>,
    /// The [`Flights::tick`] before the shared store's read (or write) the answer rests on: a
    /// waiter that joined after it may have begun after an invalidation that read did not
    /// see, so it loads again. `u64::MAX` while the answer rests on no such read.
    shares_before: AtomicU64,
}

static FLIGHT_IDS: AtomicU64 = AtomicU64::new(0);

struct FlightState<T> {
    outcome: Option<Outcome<T>>,
    /// One slot per waiter that has polled; a waiter that leaves empties its slot.
    wakers: Vec<Option<Waker>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while these locks are held, so a poisoned lock still holds sound data.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Hash + Eq + Clone, T: Clone> Flights<K, T> {
    pub(crate) fn new() -> Self {
        Flights {
            registry: Mutex::new(Registry {
                epoch: 0,
                keys: HashMap::new(),
                running: 0,
            }),
            ticks: AtomicU64::new(0),
        }
    }

    /// The next point in one order of this cache's joins and its loads' reads of the
    /// shared store: a caller whose tick comes before a read's began before that read was
    /// sent (see [`Leader::rests_on`]).
    pub(crate) fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::SeqCst)
    }

    /// Waits for the key's flight, or leads a new one that later callers join.
    pub(crate) fn join(self: &Arc<Self>, key: &K) -> Join<K, T> {
        let mut registry = lock(&self.registry);
        if let Some(flight) = registry.keys.get(key).and_then(|l| l.flight.as_ref()) {
            return Join::Waiter(Waiter {
                flight: flight.clone(),
                slot: None,
            });
        }
        Join::Leader(self.start_locked(&mut registry, key, true))
    }

    /// A load nobody joins (coalescing is off), fenced like any other.
    pub(crate) fn start(self: &Arc<Self>, key: &K) -> Leader<K, T> {
        let mut registry = lock(&self.registry);
        self.start_locked(&mut registry, key, false)
    }

    fn start_locked(
        self: &Arc<Self>,
        registry: &mut Registry<K, T>,
        key: &K,
        joinable: bool,
    ) -> Leader<K, T> {
        let flight = Arc::new(Flight {
            id: FLIGHT_IDS.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(FlightState {
                outcome: None,
                wakers: Vec::new(),
            }),
            span: std::sync::OnceLock::new(),
            shares_before: AtomicU64::new(u64::MAX),
        });
        let epoch = registry.epoch;
        registry.running += 1;
        let loads = registry.keys.entry(key.clone()).or_insert(Loads {
            fence: 0,
            running: 0,
            flight: None,
        });
        loads.running += 1;
        if joinable {
            loads.flight = Some(flight.clone());
        }
        Leader {
            flights: self.clone(),
            key: key.clone(),
            ticket: Ticket {
                epoch,
                fence: loads.fence,
            },
            flight,
            settled: false,
        }
    }

    /// Fences out the key's running loads: they still answer their waiters but no longer
    /// store, and the next caller starts a new flight. No load, no record to keep.
    pub(crate) fn invalidate(&self, key: &K) {
        if let Some(loads) = lock(&self.registry).keys.get_mut(key) {
            loads.fence += 1;
            loads.flight = None;
        }
    }

    /// Fences out every running load.
    pub(crate) fn invalidate_all(&self) {
        let mut registry = lock(&self.registry);
        registry.epoch += 1;
        registry
            .keys
            .values_mut()
            .for_each(|loads| loads.flight = None);
    }

    /// Loads running now, joinable or not.
    pub(crate) fn len(&self) -> usize {
        lock(&self.registry).running
    }
}

/// A running load: its fences and its flight. Dropping it unsettled hands the key to a
/// waiter.
pub(crate) struct Leader<K: Hash + Eq + Clone, T: Clone> {
    flights: Arc<Flights<K, T>>,
    key: K,
    ticket: Ticket,
    flight: Arc<Flight<T>>,
    settled: bool,
}

impl<K: Hash + Eq + Clone, T: Clone> Leader<K, T> {
    /// A waiter on this leader's own flight, for a caller whose origin runs elsewhere.
    pub(crate) fn waiter(&self) -> Waiter<T> {
        Waiter {
            flight: self.flight.clone(),
            slot: None,
        }
    }

    /// Identifies the flight (see [`Waiter::flight_id`]).
    pub(crate) fn flight_id(&self) -> u64 {
        self.flight.id
    }

    /// The span this load runs in, for its waiters' spans to follow from.
    pub(crate) fn traced(&self, span: &tracing::Span) {
        let _ = self.flight.span.set(span.clone());
    }

    /// The answer rests on what the shared store held after `tick` (a read sent, or a
    /// publish the store took, after it): only waiters that joined before it share the
    /// answer; a later one loads again. Waiters read this once the outcome is in.
    pub(crate) fn rests_on(&self, tick: u64) {
        self.flight.shares_before.store(tick, Ordering::Relaxed);
    }

    /// Publishes `outcome` to every waiter. `store` receives the key and runs under the
    /// registry lock, only if no invalidation fenced this load out since it started.
    pub(crate) fn settle(mut self, outcome: T, store: impl FnOnce(K)) {
        self.settled = true;
        self.finish(Outcome::Done(outcome), Some(store));
    }

    fn finish(&mut self, outcome: Outcome<T>, store: Option<impl FnOnce(K)>) {
        {
            let mut registry = lock(&self.flights.registry);
            let epoch = registry.epoch;
            registry.running -= 1;
            if let Some(loads) = registry.keys.get_mut(&self.key) {
                let ours = loads
                    .flight
                    .as_ref()
                    .is_some_and(|f| Arc::ptr_eq(f, &self.flight));
                if ours {
                    loads.flight = None;
                }
                let current = Ticket {
                    epoch,
                    fence: loads.fence,
                };
                if let Some(store) = store.filter(|_| current == self.ticket) {
                    store(self.key.clone());
                }
                loads.running -= 1;
                if loads.running == 0 {
                    registry.keys.remove(&self.key);
                }
            }
        }
        let wakers = {
            let mut state = lock(&self.flight.state);
            state.outcome = Some(outcome);
            std::mem::take(&mut state.wakers)
        };
        wakers.into_iter().flatten().for_each(Waker::wake);
    }
}

impl<K: Hash + Eq + Clone, T: Clone> Drop for Leader<K, T> {
    fn drop(&mut self) {
        if !self.settled {
            self.finish(Outcome::Abandoned, None::<fn(K)>);
        }
    }
}

/// Awaits the outcome of somebody else's flight. Dropping it leaves the flight untouched.
pub(crate) struct Waiter<T> {
    flight: Arc<Flight<T>>,
    slot: Option<usize>,
}

impl<T> Waiter<T> {
    /// The flight awaited, comparable with [`Leader::flight_id`].
    pub(crate) fn flight_id(&self) -> u64 {
        self.flight.id
    }

    /// Whether the outcome, once in, answers a caller that took its [`Flights::tick`] `joined`
    /// before joining: it does unless it rests on a read of the shared store sent before
    /// that caller joined (see [`Leader::rests_on`]).
    pub(crate) fn answers(&self, joined: u64) -> bool {
        joined < self.flight.shares_before.load(Ordering::Relaxed)
    }

    /// The span of the load awaited, once its leader opened one.
    pub(crate) fn load_span(&self) -> Option<&tracing::Span> {
        self.flight.span.get()
    }
}

impl<T: Clone> Future for Waiter<T> {
    type Output = Outcome<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<T>> {
        let this = self.get_mut();
        let mut state = lock(&this.flight.state);
        if let Some(outcome) = &state.outcome {
            return Poll::Ready(outcome.clone());
        }
        match this.slot {
            Some(i) => match &mut state.wakers[i] {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            },
            None => {
                state.wakers.push(Some(cx.waker().clone()));
                this.slot = Some(state.wakers.len() - 1);
            }
        }
        Poll::Pending
    }
}

impl<T> Drop for Waiter<T> {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let mut state = lock(&self.flight.state);
            // Once the outcome is in, the slots were handed out and the vector emptied.
            if state.outcome.is_none() {
                state.wakers[i] = None;
            }
        }
    }
}
