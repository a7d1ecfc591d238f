//! What a replica's listeners confirm, and what a write waits for: a passage follows
//! everything sent to the listeners before it and acts once each has taken it (a hearing
//! lease's renewal, an answer to another replica's write); an acknowledged write's
//! answers are collected by the id its ask carries, against the registry's list of
//! replicas whose hearing leases may run (`Hearer`). See `crate::hearing` for the lease.
use crate::clock::StoreInstant;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tokio::sync::Notify;

/// A marker that follows everything sent to a replica's listeners before it: it acts when
/// every listener has taken it from its queue, which each does only after handling every
/// event before it. A listener that fell behind far enough to miss it (it lagged, and
/// drops every copy instead) keeps it from acting at all, since what it skipped was not
/// applied in order.
pub(crate) struct Passage {
    /// How many listeners must take it; `usize::MAX` until it was sent to all of them.
    expected: AtomicUsize,
    taken: AtomicUsize,
    act: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Passage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Passage")
            .field("taken", &self.taken.load(Ordering::Relaxed))
            .finish()
    }
}

/// Each passage is only itself.
impl PartialEq for Passage {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Passage {}

impl Passage {
    pub(crate) fn new(act: impl FnOnce() + Send + 'static) -> Self {
        Self {
            expected: AtomicUsize::new(usize::MAX),
            taken: AtomicUsize::new(0),
            act: Mutex::new(Some(Box::new(act))),
        }
    }

    /// Sent: `listeners` were there to take it (counted after the send, so one that came
    /// later and never sees it keeps it from acting, rather than one being missed).
    pub(crate) fn sent_to(&self, listeners: usize) {
        self.expected.store(listeners, Ordering::Release);
    }

    /// A listener took it, after handling everything before it.
    pub(crate) fn taken(&self) {
        self.taken.fetch_add(1, Ordering::AcqRel);
    }
}

impl Drop for Passage {
    fn drop(&mut self) {
        let expected = *self.expected.get_mut();
        if *self.taken.get_mut() < expected {
            return;
        }
        let act = self.act.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Some(act) = act.take() {
            act();
        }
    }
}

/// A replica whose hearing lease may still run, as the registry lists it: an acknowledged
/// write waits for its acknowledgement until `ends`, when its lease has run out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hearer {
    pub(crate) replica: String,
    pub(crate) ends: StoreInstant,
}

/// The acknowledgements this replica's writes wait for, by the id their asks carry.
#[derive(Default)]
pub(crate) struct AckRegistry {
    next: AtomicU64,
    waiting: Arc<Mutex<HashMap<u64, Arc<AckState>>>>,
}

#[derive(Default)]
struct AckState {
    /// The replicas that acknowledged.
    acked: Mutex<HashSet<String>>,
    arrived: Notify,
}

impl AckRegistry {
    /// Registers a write's acknowledgements, before its ask goes out.
    pub(crate) fn register(&self) -> Acknowledgements {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let state = Arc::new(AckState::default());
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.insert(id, state.clone());
        Acknowledgements {
            id,
            state,
            registry: Arc::downgrade(&self.waiting),
        }
    }

    /// `replica` handled everything sent to it before the ask `id`.
    pub(crate) fn acknowledged(&self, id: u64, replica: &str) {
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(state) = waiting.get(&id) {
            let mut acked = state.acked.lock().unwrap_or_else(PoisonError::into_inner);
            acked.insert(replica.to_owned());
            state.arrived.notify_waiters();
        }
    }
}

/// One write's acknowledgements, collected as they arrive; unregistered when dropped.
pub(crate) struct Acknowledgements {
    id: u64,
    state: Arc<AckState>,
    registry: Weak<Mutex<HashMap<u64, Arc<AckState>>>>,
}

impl Acknowledgements {
    /// The id its ask carries.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Waits until each of `hearers` acknowledged or its lease ended: `true` if every one
    /// acknowledged.
    pub(crate) async fn wait(&self, hearers: &[Hearer]) -> bool {
        loop {
            let arrived = std::pin::pin!(self.state.arrived.notified());
            let now = StoreInstant::now();
            let next = {
                let acked = self
                    .state
                    .acked
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let pending = hearers.iter().filter(|h| !acked.contains(&h.replica));
                let next = pending
                    .map(|hearer| hearer.ends)
                    .filter(|&ends| ends > now)
                    .min();
                match next {
                    Some(next) => next,
                    None => return hearers.iter().all(|h| acked.contains(&h.replica)),
                }
            };
            let until = std::pin::pin!(super::background::sleep(
                next.saturating_duration_since(now)
            ));
            futures_util::future::select(arrived, until).await;
        }
    }
}

impl Drop for Acknowledgements {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            let mut waiting = registry.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passage_acts_once_every_listener_took_it() {
        let acted = Arc::new(AtomicUsize::new(0));
        let passage = {
            let acted = acted.clone();
            Arc::new(Passage::new(move || {
                acted.fetch_add(1, Ordering::Relaxed);
            }))
        };
        let (first, second) = (passage.clone(), passage.clone());
        passage.sent_to(2);
        drop(passage);
        first.taken();
        drop(first);
        assert_eq!(
            acted.load(Ordering::Relaxed),
            0,
            "one listener still to take it"
        );
        second.taken();
        drop(second);
        assert_eq!(acted.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_passage_a_listener_missed_never_acts() {
        let acted = Arc::new(AtomicUsize::new(0));
        let passage = {
            let acted = acted.clone();
            Passage::new(move || {
                acted.fetch_add(1, Ordering::Relaxed);
            })
        };
        passage.sent_to(2);
        passage.taken();
        drop(passage);
        assert_eq!(acted.load(Ordering::Relaxed), 0);
    }
}
