//! A fleet-wide admission: its permits are held in the shared store, so `limit` bounds
//! the origin calls of every replica together (after a flush, a failover to an empty
//! store, a deploy that restarts every replica), not each replica's.
//!
//! - **Permits in the store:** each is a field of one hash, named by a token of its
//!   holder's, with an expiry its holder renews every quarter of `permit_ttl` while the
//!   load runs (see `shared/redis/lua/permits.lua`). A replica that dies or freezes stops
//!   renewing, and its permits come back within `permit_ttl`; a permit reclaimed so is
//!   gone for good, so its holder cannot give it back twice or renew it into a second one.
//! - **One round trip:** an uncontended load asks once. A load that ends while loads of its
//!   replica wait hands its permit to the first of them, with no call at all while the
//!   replica holds no more than its share, so a busy replica keeps its share busy
//!   without a gap; above its share it gives the permit back.
//! - **Fair:** the store grants a replica at most its max-min fair share of the limit in
//!   whole permits, judged on what every replica holds and waits for, the remainder going
//!   round by turns, so one replica's backlog cannot starve another's; a replica above its
//!   share gives permits back as its loads end.
//! - **Waiting:** while the store is full, one of a replica's waiting loads asks for all
//!   of them at a time, at most every [`POLL`], and what the store grants goes to the
//!   first in line (a `High` load joins the line at its front). Those asks also tell the
//!   replica its share as the others' demand changes.
//! - **The store unreachable** (its circuit breaker open, or [`FAILED_ASKS`] asks in a
//!   row unanswered): loads take the replica's own `local_limit` permits instead, for
//!   [`RETRY`] before the store is asked again. The fleet then sees at most
//!   `local_limit` origin calls per replica cut off (plus those holding store permits from
//!   before, until they end), never an unbounded number.
use crate::clock::StoreInstant as Instant;
use crate::config::FleetWide;
use crate::policy::Priority;
use crate::shared::background;
use crate::shared::replica::Replica;
use crate::shared::store::{PermitRequest, PermitToken, StoreError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// How often a replica's waiting loads ask the store again while it is full.
pub(crate) const POLL: Duration = Duration::from_millis(20);
/// How long a replica's waiting loads count in the others' shares after it last asked.
const WAIT_TTL: Duration = Duration::from_millis(200);
/// How long loads take the local share after the store could not be asked.
pub(crate) const RETRY: Duration = Duration::from_secs(1);
/// Asks in a row that failed before the store is taken as unreachable (at once when the
/// circuit breaker is open): one slow answer leaves the line waiting for the next poll.
const FAILED_ASKS: u32 = 2;
/// The most permits one ask names: a line longer than this asks again as grants come.
const MOST_ASKED: usize = 256;

/// One admission's fleet-wide side, in one replica.
#[derive(Debug)]
pub(crate) struct Fleet {
    name: Arc<str>,
    limit: usize,
    permit_ttl: Duration,
    /// The permits loads take while the store cannot be reached.
    local: Arc<Semaphore>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Loads waiting for a store permit, first in line first.
    waiting: VecDeque<Waiter>,
    next_id: u64,
    /// Permits asked for in requests the store has not answered yet.
    asking_for: usize,
    /// The last answer left loads waiting: the store is full, and asks wait `POLL`
    /// between them.
    full: bool,
    /// When a waiting load last asked.
    asked: Option<Instant>,
    /// This replica's fair share as of the last answer.
    share: usize,
    /// Until when the store is taken as unreachable.
    unreachable_until: Option<Instant>,
    /// Asks in a row that got no answer.
    failed_asks: u32,
    counts: FleetCounts,
}

/// What a replica's fleet-wide admission did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FleetCounts {
    /// Store permits this replica holds now.
    pub(crate) held: usize,
    /// Loads holding a local permit now (the store unreachable).
    pub(crate) local: usize,
    /// Loads that took a local permit because the store could not be asked.
    pub(crate) local_total: u64,
    /// Permits that lapsed while their load ran (a renewal found them gone).
    pub(crate) lapsed: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    answer: oneshot::Sender<StorePermit>,
}

/// A load's fleet-wide permit: one the store holds, or one of the replica's local share,
/// held for what its drop does.
#[derive(Debug)]
pub(crate) enum FleetPermit {
    Store { _permit: StorePermit },
    Local { _permit: LocalPermit },
}

/// A permit held in the store: renewed while held; when dropped, handed to the replica's
/// next waiting load or given back.
pub(crate) struct StorePermit(Option<Holding>);

/// What a stored permit is: its token, and the task renewing it.
struct Holding {
    fleet: Arc<Fleet>,
    replica: Arc<Replica>,
    token: PermitToken,
    renewing: JoinHandle<()>,
    /// A renewal found the permit gone (lapsed, reclaimed): it is handed to no one.
    lapsed: Arc<AtomicBool>,
}

/// A permit of the local share.
#[derive(Debug)]
pub(crate) struct LocalPermit {
    fleet: Arc<Fleet>,
    _permit: OwnedSemaphorePermit,
}

impl Fleet {
    pub(crate) fn new(name: Arc<str>, limit: usize, settings: FleetWide) -> Self {
        Fleet {
            name,
            limit,
            permit_ttl: settings.permit_ttl,
            local: Arc::new(Semaphore::new(settings.local_limit.max(1))),
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn counts(&self) -> FleetCounts {
        self.state().counts
    }

    /// A permit: the store's, or the local share's while the store cannot be reached.
    /// Waits as long as it takes; the admission's queue timeout bounds it. A `High` load
    /// goes to the front of this replica's line.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        replica: &Arc<Replica>,
        priority: Priority,
    ) -> FleetPermit {
        let (answer, mut granted) = oneshot::channel();
        let in_line = {
            let mut state = self.state();
            let unreachable = (state.unreachable_until).is_some_and(|until| Instant::now() < until);
            (!unreachable).then(|| {
                let id = state.next_id;
                state.next_id += 1;
                let waiter = Waiter { id, answer };
                match priority {
                    Priority::High => state.waiting.push_front(waiter),
                    Priority::Normal | Priority::Low => state.waiting.push_back(waiter),
                }
                id
            })
        };
        let Some(id) = in_line else {
            return self.local().await;
        };
        let _in_line = InLine { fleet: self, id };
        loop {
            if self.due() {
                // On the background threads: an ask runs to its end even if this load
                // stops waiting, so what it was granted reaches the line (or goes back).
                let (fleet, replica) = (self.clone(), replica.clone());
                background::spawn(async move {
                    fleet.ask(&replica, None).await;
                });
            }
            match tokio::time::timeout(POLL, &mut granted).await {
                Ok(Ok(permit)) => return FleetPermit::Store { _permit: permit },
                // Let go unanswered: the store could not be asked.
                Ok(Err(_)) => return self.local().await,
                Err(_) => {}
            }
        }
    }

    /// Whether a waiting load asks now: at once while the store has permits to give,
    /// every `POLL` (by whichever load comes first) while it is full.
    fn due(&self) -> bool {
        let mut state = self.state();
        let now = Instant::now();
        let due = !state.full || state.asked.is_none_or(|at| now >= at + POLL);
        if due {
            state.asked = Some(now);
        }
        due
    }

    async fn local(self: &Arc<Self>) -> FleetPermit {
        let permit = self.local.clone().acquire_owned().await;
        let permit = permit.expect("the local share's semaphore is never closed");
        let mut state = self.state();
        state.counts.local += 1;
        state.counts.local_total += 1;
        FleetPermit::Local {
            _permit: LocalPermit {
                fleet: self.clone(),
                _permit: permit,
            },
        }
    }

    /// Asks the store for a permit for each waiting load no request in flight asks for
    /// already (up to the limit), giving `returned` back in the same call, and hands what
    /// it grants to the first in line (a surplus goes back). Sends nothing, and answers
    /// `false`, when no load needs asking for.
    async fn ask(self: &Arc<Self>, replica: &Arc<Replica>, returned: Option<PermitToken>) -> bool {
        let wanted = {
            let mut state = self.state();
            let wanted = (state.waiting.len().saturating_sub(state.asking_for))
                .min(self.limit)
                .min(MOST_ASKED);
            state.asking_for += wanted;
            wanted
        };
        if wanted == 0 {
            return false;
        }
        let tag = replica.store().replica();
        let request = PermitRequest {
            admission: self.name.clone(),
            limit: self.limit,
            ttl: self.permit_ttl,
            wait_ttl: WAIT_TTL,
            returned,
            tokens: (0..wanted).map(|_| PermitToken::of_replica(tag)).collect(),
        };
        let answer = replica.store().take_permits(request).await;
        let mut state = self.state();
        state.asking_for -= wanted;
        match answer {
            Ok(permits) => {
                state.unreachable_until = None;
                state.failed_asks = 0;
                state.full = permits.granted.len() < wanted;
                state.share = permits.share;
                let mut unwanted = Vec::new();
                for token in permits.granted {
                    state.counts.held += 1;
                    let lapsed = Arc::new(AtomicBool::new(false));
                    let mut permit = StorePermit(Some(Holding {
                        fleet: self.clone(),
                        replica: replica.clone(),
                        token,
                        renewing: self.renew(replica.clone(), token, lapsed.clone()),
                        lapsed,
                    }));
                    // To the first in line that still waits; a surplus goes back.
                    while let Some(waiter) = state.waiting.pop_front() {
                        match waiter.answer.send(permit) {
                            Ok(()) => {
                                permit = StorePermit(None);
                                break;
                            }
                            Err(back) => permit = back,
                        }
                    }
                    unwanted.push(permit);
                }
                if state.waiting.is_empty() {
                    // Nobody left to ask for: the next load asks at once.
                    state.full = false;
                }
                // Dropped once the lock is let go: a permit's drop takes it.
                drop(state);
                drop(unwanted);
            }
            Err(error) => {
                state.failed_asks += 1;
                let breaker_open = error == StoreError::Unavailable;
                if !breaker_open && state.failed_asks < FAILED_ASKS {
                    // The line waits for the next poll; a grant this ask got after all
                    // lapses within the permit TTL.
                    state.full = true;
                    return true;
                }
                tracing::warn!(admission = %self.name, %error, "the shared store gave no fleet-wide permits: loads take the replica's local share");
                state.unreachable_until = Some(Instant::now() + RETRY);
                // Every load in line is let go unanswered, and takes the local share.
                let waiting = std::mem::take(&mut state.waiting);
                drop(state);
                drop(waiting);
            }
        }
        true
    }

    /// Renews the permit `token` every quarter of its TTL until it is dropped or lapsed.
    fn renew(
        self: &Arc<Self>,
        replica: Arc<Replica>,
        token: PermitToken,
        lapsed: Arc<AtomicBool>,
    ) -> JoinHandle<()> {
        let fleet = self.clone();
        background::handle().spawn(async move {
            loop {
                tokio::time::sleep(fleet.permit_ttl / 4).await;
                let renewed = (replica.store())
                    .renew_permit(&fleet.name, token, fleet.permit_ttl)
                    .await;
                if let Ok(false) = renewed {
                    tracing::warn!(admission = %fleet.name, "a fleet-wide permit lapsed while its load ran (a renewal came too late): the fleet may see one origin call above its limit until the load ends");
                    lapsed.store(true, Ordering::Relaxed);
                    fleet.state().counts.lapsed += 1;
                    return;
                }
            }
        })
    }

    /// A load's permit is free: to the next load in line while this replica holds no
    /// more than its share (no call at all), else back to the store, swapped in the same
    /// call for whatever share the loads in line may still take.
    fn ended(holding: Holding) {
        let fleet = holding.fleet.clone();
        let mut state = fleet.state();
        let lapsed = holding.lapsed.load(Ordering::Relaxed);
        let mut permit = StorePermit(Some(holding));
        if state.counts.held <= state.share && !lapsed {
            while let Some(waiter) = state.waiting.pop_front() {
                match waiter.answer.send(permit) {
                    Ok(()) => {
                        state.full &= !state.waiting.is_empty();
                        return;
                    }
                    Err(back) => permit = back,
                }
            }
        }
        state.counts.held -= 1;
        drop(state);
        let Some(holding) = permit.0.take() else {
            return;
        };
        holding.renewing.abort();
        background::spawn(async move {
            let Holding {
                fleet,
                replica,
                token,
                ..
            } = holding;
            if !fleet.ask(&replica, Some(token)).await {
                // A call that fails leaves the permit to lapse at its TTL.
                let _ = replica.store().give_permit(&fleet.name, token).await;
            }
        });
    }
}

/// A waiting load's place in line, left however the load stops waiting.
struct InLine<'a> {
    fleet: &'a Fleet,
    id: u64,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        let mut state = self.fleet.state();
        state.waiting.retain(|w| w.id != self.id);
    }
}

impl std::fmt::Debug for StorePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = self.0.as_ref().map(|holding| holding.token);
        f.debug_tuple("StorePermit").field(&token).finish()
    }
}

impl Drop for StorePermit {
    fn drop(&mut self) {
        if let Some(holding) = self.0.take() {
            Fleet::ended(holding);
        }
    }
}

impl Drop for LocalPermit {
    fn drop(&mut self) {
        self.fleet.state().counts.local -= 1;
    }
}
