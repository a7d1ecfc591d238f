//! Single flight per key: one leader runs the origin, everyone else who asks for the same
//! key meanwhile waits for the leader's outcome.
//!
//! - **On success or error** the leader [settles](Leader::settle): the value is stored and
//!   the registry entry removed under one lock (so a later caller finds one or the other,
//!   never neither), then every waiter gets a clone of the outcome. Errors are shared, not
//!   stored.
//! - **On cancel or panic** the leader's guard is dropped unsettled: the entry is removed
//!   and the waiters wake with [`Outcome::Abandoned`]; each joins again, the first becomes
//!   the new leader (takeover) and the rest wait for it. No waiter hangs.
//! - **No lock is held while user code runs**: the registry lock covers a map operation,
//!   a flight's lock an outcome read or a waker swap.
//!
//! This file is compiled twice: here against `std`, and in `flight_model` against
//! shuttle's locks, which is why it reaches its locks through `super::sync`.
use super::sync::{Arc, Mutex, MutexGuard};
use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::PoisonError;
use std::task::{Context, Poll, Waker};

/// The in-flight loads of one cache, by key.
pub(crate) struct Flights<K, T> {
    map: Mutex<HashMap<K, Arc<Flight<T>>>>,
}

/// What [`Flights::join`] made of the caller.
pub(crate) enum Join<K: Hash + Eq, T: Clone> {
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
    state: Mutex<FlightState<T>>,
}

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
            map: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn join(self: &Arc<Self>, key: &K) -> Join<K, T> {
        let mut map = lock(&self.map);
        if let Some(flight) = map.get(key) {
            return Join::Waiter(Waiter {
                flight: flight.clone(),
                slot: None,
            });
        }
        let flight = Arc::new(Flight {
            state: Mutex::new(FlightState {
                outcome: None,
                wakers: Vec::new(),
            }),
        });
        map.insert(key.clone(), flight.clone());
        Join::Leader(Leader {
            flights: self.clone(),
            key: key.clone(),
            flight,
            settled: false,
        })
    }

    /// Detaches the key's flight, if any: it runs on and its waiters still get its
    /// outcome, but it no longer stores it (an invalidation must not be undone by a load
    /// that started before it), and the next caller starts a new flight.
    pub(crate) fn forget(&self, key: &K) {
        lock(&self.map).remove(key);
    }

    pub(crate) fn forget_all(&self) {
        lock(&self.map).clear();
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

/// The caller that runs the origin. Dropping it unsettled hands the key to a waiter.
pub(crate) struct Leader<K: Hash + Eq, T: Clone> {
    flights: Arc<Flights<K, T>>,
    key: K,
    flight: Arc<Flight<T>>,
    settled: bool,
}

impl<K: Hash + Eq, T: Clone> Leader<K, T> {
    /// A waiter on this leader's own flight, for a caller whose origin runs elsewhere.
    pub(crate) fn waiter(&self) -> Waiter<T> {
        Waiter {
            flight: self.flight.clone(),
            slot: None,
        }
    }

    /// Publishes `outcome` to every waiter. `store` receives the key and runs under the
    /// registry lock, only while this flight is still registered (not forgotten).
    pub(crate) fn settle(mut self, outcome: T, store: impl FnOnce(K)) {
        self.settled = true;
        self.finish(Outcome::Done(outcome), Some(store));
    }

    fn finish(&mut self, outcome: Outcome<T>, store: Option<impl FnOnce(K)>) {
        {
            let mut map = lock(&self.flights.map);
            let ours = map
                .get(&self.key)
                .is_some_and(|f| Arc::ptr_eq(f, &self.flight));
            if ours {
                if let Some((key, _)) = map.remove_entry(&self.key) {
                    if let Some(store) = store {
                        store(key);
                    }
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

impl<K: Hash + Eq, T: Clone> Drop for Leader<K, T> {
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
