//! Origin admission: named semaphores that bound how many loads, of any key of any cache
//! naming them, call the origin at once, and shed a load that queues past `queue_timeout`.
//!
//! Coalescing stops one key's herd; a flush makes thousands of *different* keys miss at
//! once, and only a limit across keys keeps the origin alive then. Only a flight's leader
//! queues here, right before its origin call, so waiters of a key never hold a permit and
//! a limit of N means N origin calls, not N callers.
//!
//! When permits are short, a cache's [`Priority`] decides who gives way: `reserved_high`
//! of the permits are only for high-priority loads (the rest serve every priority), and a
//! low-priority load that would queue behind `low_queue` or more loads is shed at once,
//! not after the queue timeout, so it never holds a place that a load that matters waits
//! behind.
use crate::config::{FleetWide, Shares};
use crate::deadline;
use crate::error::Error;
use crate::policy::Priority;
use crate::shared::replica::Replica;
use fleet::{Fleet, FleetPermit};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One named semaphore of a runtime.
#[derive(Debug)]
pub(crate) struct Admission {
    name: Arc<str>,
    limit: usize,
    queue_timeout: Duration,
    /// The permits every priority takes: `limit - reserved_high`.
    permits: Arc<Semaphore>,
    /// The permits only `High` loads take (none when `reserved_high` is 0).
    reserved: Option<Arc<Semaphore>>,
    /// Queued loads at which a `Low` one is shed at once.
    low_queue: Option<usize>,
    /// Loads waiting for a permit now.
    queued: AtomicUsize,
    /// The permits of each key group with a load admitted or queued (none without
    /// `per_group`).
    groups: Option<Arc<KeyGroups>>,
    /// A fleet-wide admission's permits in the shared store (none: each replica's own).
    fleet: Option<Arc<Fleet>>,
}

/// A key group's hash, with a fixed hasher: the same group in every cache and every run
/// (`CacheBuilder::admission_group` and the attribute's `admission_group` both hash with
/// it).
pub fn group_hash<G: Hash + ?Sized>(group: &G) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    group.hash(&mut hasher);
    hasher.finish()
}

/// The groups of one admission: each holds at most `per_group` permits at once. A group
/// is forgotten as soon as none of its loads holds or waits for a permit, so the map
/// holds only the groups that are loading.
#[derive(Debug)]
struct KeyGroups {
    per_group: usize,
    slots: Mutex<HashMap<u64, Slot>>,
}

/// One group's permits, and how many loads are in the group (counted under the map's
/// lock, so the last one out removes it, however many leave at once).
#[derive(Debug)]
struct Slot {
    permits: Arc<Semaphore>,
    loads: usize,
}

impl KeyGroups {
    fn slots(&self) -> MutexGuard<'_, HashMap<u64, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place in group `id`, whose semaphore is made on its first load.
    fn of(self: &Arc<Self>, id: u64) -> InGroup {
        let mut slots = self.slots();
        let slot = slots.entry(id).or_insert_with(|| Slot {
            permits: Arc::new(Semaphore::new(self.per_group)),
            loads: 0,
        });
        slot.loads += 1;
        InGroup {
            permit: None,
            permits: slot.permits.clone(),
            id,
            groups: self.clone(),
        }
    }
}

/// A load's place in its group: the group's permit once it has one. Dropped, it gives
/// the permit back and, as the group's last load, forgets the group.
#[derive(Debug)]
struct InGroup {
    permit: Option<OwnedSemaphorePermit>,
    permits: Arc<Semaphore>,
    id: u64,
    groups: Arc<KeyGroups>,
}

impl Drop for InGroup {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut slots = self.groups.slots();
        if let Some(slot) = slots.get_mut(&self.id) {
            slot.loads -= 1;
            if slot.loads == 0 {
                slots.remove(&self.id);
            }
        }
    }
}

/// What an admitted load holds until its origin call ends: the admission's permit and,
/// with `per_group`, its group's.
#[derive(Debug)]
pub(crate) struct Permit {
    _admission: OwnedSemaphorePermit,
    /// Boxed: a load's future holds its permit across the origin call.
    _group: Option<Box<InGroup>>,
    /// A fleet-wide admission's permit, on a shared backend.
    _fleet: Option<Box<FleetPermit>>,
}

impl Admission {
    #[cfg(test)]
    pub(crate) fn new(name: Arc<str>, limit: usize, queue_timeout: Duration) -> Self {
        Self::with_shares(name, limit, queue_timeout, Shares::default())
    }

    /// An admission whose permits are shared between priorities as `shares` says (the
    /// configuration has checked that the reserved permits leave at least one).
    pub(crate) fn with_shares(
        name: Arc<str>,
        limit: usize,
        queue_timeout: Duration,
        shares: Shares,
    ) -> Self {
        let reserved = shares.reserved_high.min(limit.saturating_sub(1));
        Admission {
            name,
            limit,
            queue_timeout,
            permits: Arc::new(Semaphore::new(limit - reserved)),
            reserved: (reserved > 0).then(|| Arc::new(Semaphore::new(reserved))),
            low_queue: shares.low_queue,
            queued: AtomicUsize::new(0),
            groups: shares.per_group.map(|per_group| {
                Arc::new(KeyGroups {
                    // Above the limit a share changes nothing (and the configuration
                    // refuses it).
                    per_group: per_group.clamp(1, limit.max(1)),
                    slots: Mutex::new(HashMap::new()),
                })
            }),
            fleet: None,
        }
    }

    /// Makes this admission fleet-wide (`None` leaves it each replica's own).
    pub(crate) fn fleet_wide(mut self, settings: Option<FleetWide>) -> Self {
        self.fleet =
            settings.map(|settings| Arc::new(Fleet::new(self.name.clone(), self.limit, settings)));
        self
    }

    /// What the fleet-wide side did in this replica, if the admission is fleet-wide.
    pub(crate) fn fleet_counts(&self) -> Option<fleet::FleetCounts> {
        self.fleet.as_ref().map(|fleet| fleet.counts())
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// Origin calls holding a permit right now.
    #[cfg(feature = "metrics")]
    pub(crate) fn in_use(&self) -> usize {
        let reserved = self.reserved.as_ref();
        self.limit
            - self.permits.available_permits()
            - reserved.map_or(0, |r| r.available_permits())
    }

    /// Loads waiting for a permit now.
    #[cfg(feature = "metrics")]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Key groups with a load admitted or queued now.
    #[cfg(any(test, feature = "metrics"))]
    pub(crate) fn groups(&self) -> usize {
        self.groups
            .as_ref()
            .map_or(0, |groups| groups.slots().len())
    }

    /// A permit, or why none: `Queued` once `queue_timeout` passed in the queue (fair:
    /// first come, first admitted), `Early` for a low-priority load that found the queue
    /// at `low_queue`. With `per_group`, a load of key group `group` takes its group's
    /// permit first, so a group at its share waits without holding one of the
    /// admission's. Where no timer can run (no Tokio runtime, or one without its time
    /// driver) the timeout cannot be kept, so the caller queues until a permit frees.
    ///
    /// A fleet-wide admission then takes a permit of the whole fleet's from `replica`'s
    /// shared store, within what is left of the queue timeout (see [`fleet`]). Without a
    /// shared store (the embedded backend) its limit is this process's, which is then
    /// the whole fleet.
    pub(crate) async fn enter(
        &self,
        priority: Priority,
        group: Option<u64>,
        replica: Option<&Arc<Replica>>,
    ) -> Result<Permit, Shed> {
        let Some((fleet, replica)) = self.fleet.as_ref().zip(replica) else {
            return self.enter_replica(priority, group).await;
        };
        let asked = crate::clock::StoreInstant::now();
        let mut permit = self.enter_replica(priority, group).await?;
        let left = self.queue_timeout.saturating_sub(asked.elapsed());
        // Waiting for the fleet is queueing too: `low_queue` counts these loads.
        self.queued.fetch_add(1, Ordering::Relaxed);
        let _queued = Queued(&self.queued);
        match deadline::within(left, fleet.enter(replica, priority)).await {
            Some(in_fleet) => {
                permit._fleet = Some(Box::new(in_fleet));
                Ok(permit)
            }
            None => Err(Shed::Queued),
        }
    }

    /// [`Admission::enter`]'s permit of this replica's.
    async fn enter_replica(&self, priority: Priority, group: Option<u64>) -> Result<Permit, Shed> {
        let mut in_group = (self.groups.as_ref()).and_then(|groups| Some(groups.of(group?)));
        if let Some(in_group) = &mut in_group {
            in_group.permit = in_group.permits.clone().try_acquire_owned().ok();
        }
        let reserved = self
            .reserved
            .as_ref()
            .filter(|_| priority == Priority::High);
        let at_once = || {
            let shared = self.permits.clone().try_acquire_owned().ok();
            shared.or_else(|| reserved.and_then(|r| r.clone().try_acquire_owned().ok()))
        };
        if in_group.as_ref().is_none_or(|g| g.permit.is_some())
            && let Some(permit) = at_once()
        {
            return Ok(Permit {
                _admission: permit,
                _group: in_group.map(Box::new),
                _fleet: None,
            });
        }
        let wait = async {
            // A group at its share waits for one of its own permits first, holding none
            // of the admission's and not counted in its queue.
            if let Some(in_group) = in_group.as_mut().filter(|g| g.permit.is_none()) {
                let permit = in_group.permits.clone().acquire_owned().await;
                in_group.permit = Some(permit.map_err(|_| Shed::Queued)?);
                if let Some(permit) = at_once() {
                    return Ok(permit);
                }
            }
            // Checked before this load counts itself, so a load shed here is never seen
            // as queued by another.
            let queued = self.queued.load(Ordering::Relaxed);
            if priority == Priority::Low && self.low_queue.is_some_and(|at| queued >= at) {
                return Err(Shed::Early);
            }
            self.queued.fetch_add(1, Ordering::Relaxed);
            let _queued = Queued(&self.queued);
            let shared = self.permits.clone().acquire_owned();
            let permit = match reserved {
                None => shared.await,
                // A high-priority load takes whichever frees first.
                Some(reserved) => {
                    let reserved = reserved.clone().acquire_owned();
                    let (shared, reserved) = (std::pin::pin!(shared), std::pin::pin!(reserved));
                    futures_util::future::select(shared, reserved)
                        .await
                        .factor_first()
                        .0
                }
            };
            // The semaphores are never closed, so acquiring cannot fail otherwise.
            permit.map_err(|_| Shed::Queued)
        };
        match deadline::within(self.queue_timeout, wait).await {
            Some(Ok(permit)) => Ok(Permit {
                _admission: permit,
                _group: in_group.map(Box::new),
                _fleet: None,
            }),
            Some(Err(shed)) => Err(shed),
            None => Err(Shed::Queued),
        }
    }
}

/// Why a load got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shed {
    /// It queued for `queue_timeout`.
    Queued,
    /// A low-priority load that found `low_queue` loads queued already.
    Early,
}

/// Counts a load out of the queue however it leaves it (admitted, shed, dropped).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How one cache's loads are admitted to the origin.
#[derive(Debug)]
pub(crate) enum Gate {
    /// No admission semaphore: loads call the origin at once.
    Open,
    /// Through this semaphore.
    Limited(Arc<Admission>),
    /// Never: the configuration is broken (an undefined admission name, an invalid file),
    /// and every load fails with this error instead of running with settings nobody chose.
    Closed(Error),
}

impl Gate {
    /// The semaphore's limit, when there is one.
    pub(crate) fn limit(&self) -> Option<usize> {
        match self {
            Gate::Limited(admission) => Some(admission.limit()),
            Gate::Open | Gate::Closed(_) => None,
        }
    }
}

pub(crate) mod fleet;
#[cfg(test)]
mod tests;
