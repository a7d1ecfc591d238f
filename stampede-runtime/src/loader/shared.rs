//! A cache's steps on the shared store: connecting on first use, reading before the
//! origin (taking the key's lease, or waiting for the replica that holds it), publishing
//! under the lease's fence, what memory keeps, invalidating, and the notice listener that
//! keeps memory copies in line with the store.
use super::*;
use crate::store::shared::{Invalidated, Lease, LeaseFor, LeaseRequest, Published, Wake};

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// This cache's side of the shared store, connected on first use inside a Tokio
    /// runtime; `None` for the memory backend and `local` caches. The notice listener
    /// subscribes here, before the first read.
    pub(super) fn tier(&self) -> Option<&Arc<Tier<K, V>>> {
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

    /// What the shared store holds for `key`, counted, with the key's lease when `purpose`
    /// asks for it and nobody holds it.
    ///
    /// A miss whose lease another replica holds waits for that replica's notice (a value
    /// stored, an invalidation, the lease given back), registered before it reads again so
    /// a notice between the two is not missed, and never longer than the lease has left:
    /// then it reads again, and takes the lease if its holder died. A refresh never waits.
    /// An uncoalesced cache takes no lease.
    pub(super) async fn find_shared(&self, key: &K, purpose: LeaseFor) -> Option<Found<V>> {
        let tier = self.tier()?;
        let entry = tier.address(key)?;
        // Without coalescing every miss calls the origin, on every replica alike.
        let takes_lease = self.policy.coalesce() && self.policy.fleet_lease();
        let lease = takes_lease.then(|| LeaseRequest {
            purpose,
            ttl: self.policy.lease(),
        });
        let read = |entry| tier.find(entry, lease, self.clock.now(), self.next_generation());
        let mut found = read(entry).await;
        if purpose == LeaseFor::Miss && lease.is_some() {
            let (mut waited, mut rereads) = (false, 0);
            loop {
                if found.held_by().is_some() {
                    if !waited {
                        self.counters.lease_waits.bump();
                        waited = true;
                    }
                    let wake = tier.watch(&found.key);
                    found = read(found.key).await;
                    if let Some(remaining) = found.held_by() {
                        wait_for_notice(wake, remaining).await;
                    }
                    continue;
                }
                // The store found its value servable by the server's clock, so it granted
                // no lease; by this cache's clock, a moment later, the value has expired.
                // Loading now would be a load without the lease, next to the replica that
                // takes it a millisecond later: read again (the server's clock has passed
                // the deadline by then) and take the lease, or wait for its holder.
                let expired_unleased = matches!(
                    found.read.as_ref().map(|read| &read.lease),
                    Some(Lease::NotTaken)
                ) && found
                    .envelope
                    .as_ref()
                    .is_some_and(|stored| stored.state(self.clock.now()) == State::Expired);
                if expired_unleased && rereads < EXPIRED_REREADS {
                    rereads += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    found = read(found.key).await;
                    continue;
                }
                break;
            }
        }
        let now = self.clock.now();
        let state = found.envelope.as_ref().map(|stored| stored.state(now));
        match (&found.read, purpose, state) {
            (None, _, _) => self.counters.backend_errors.bump(),
            // A refresh's callers were counted where they were served; a stale value a
            // miss finds is counted when it is served.
            (Some(_), LeaseFor::Refresh, _) | (Some(_), LeaseFor::Miss, Some(State::Stale)) => {}
            (Some(_), LeaseFor::Miss, Some(State::Fresh)) => self.counters.shared_hits.bump(),
            (Some(_), LeaseFor::Miss, _) => self.counters.shared_misses.bump(),
        }
        Some(found)
    }

    /// Publishes a new value to the shared store (a fallback stays local), and returns
    /// what memory keeps of it: everything on the memory backend; on a shared one, a
    /// tiered copy, or the value loaded while the store was unreachable (degraded); nothing
    /// when the store refused it because an invalidation raised the fence meanwhile.
    /// A refused publish is counted (`publish_refused`).
    pub(super) async fn write_shared(
        &self,
        key: &K,
        mut found: Option<&mut Found<V>>,
        envelope: Envelope<V>,
        now: Instant,
    ) -> Option<Envelope<V>> {
        if let (Some(tier), Some(found)) = (self.tier(), found.as_deref_mut()) {
            if let (Some(read), false) = (&found.read, envelope.rearmed) {
                let lease = found.lease.take();
                match tier.publish(&found.key, read, lease, &envelope, now).await {
                    Some(Published::RefusedByFence | Published::RefusedBySourceVersion) => {
                        self.counters.publish_refused.bump();
                        return None;
                    }
                    Some(Published::Stored | Published::AlreadyExpired) | None => {}
                }
            }
        }
        self.memory_copy(key, found.as_deref(), envelope)
    }

    /// What memory keeps of a value on this cache's backend (see [`Inner::write_shared`]).
    pub(super) fn memory_copy(
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
    pub(super) fn shared_fallback(
        &self,
        found: Option<&mut Found<V>>,
        now: Instant,
    ) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        found?.envelope.take().filter(|last| now < last.keep_until)
    }

    /// An invalidation's failure on the shared side, naming this cache.
    fn backend_error(&self, message: String) -> Error {
        Error::Backend {
            cache: self.policy.name().clone(),
            message,
        }
    }

    /// The tier an invalidation goes through: none without a shared backend, an error
    /// when there is no connection to it (none is made outside a Tokio runtime).
    fn invalidation_tier(&self) -> Result<Option<&Arc<Tier<K, V>>>, Error> {
        if self.shared.is_none() {
            return Ok(None);
        }
        self.tier().map(Some).ok_or_else(|| {
            self.backend_error("no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into())
        })
    }

    /// The shared side of [`Cache::invalidate`].
    pub(super) async fn invalidate_shared(&self, key: &K) -> Result<(), Error> {
        let Some(tier) = self.invalidation_tier()? else {
            return Ok(());
        };
        let backend = |message: String| self.backend_error(message);
        let entry = tier.entry_key(key).map_err(|error| {
            backend(format!("the key cannot be written for the shared store ({error}); applied in this process only"))
        })?;
        tier.noticed(entry.value());
        tier.remote.invalidate(entry).await.map_err(|error| {
            backend(format!("{error}; applied in this process and queued, to be replayed before this replica reads the shared store again"))
        })
    }
}

/// Until a notice for the key, or for at most `remaining` (the lease's time left). A
/// subscription that is down cannot bring the notice: the key is read again soon instead,
/// still never later than the lease allows.
async fn wait_for_notice(wake: tokio::sync::oneshot::Receiver<Wake>, remaining: Duration) {
    match tokio::time::timeout(remaining, wake).await {
        Ok(Ok(Wake::Notice(_))) | Err(_) => {}
        Ok(Ok(Wake::SubscriptionLost) | Err(_)) => {
            tokio::time::sleep(remaining.min(UNHEARD_RECHECK)).await;
        }
    }
}

/// How often a miss reads again when the store's value expired between the store's clock
/// and this cache's: a few milliseconds of disagreement at most.
const EXPIRED_REREADS: u32 = 3;

/// While notices cannot arrive, how often a waiting miss reads its key again.
const UNHEARD_RECHECK: Duration = Duration::from_millis(100);

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// The shared side of [`Cache::invalidate_at`]: the store decides whether it is late.
    /// When the store cannot decide, the value is dropped here (the side that can only cost
    /// a reload) and the invalidation queued.
    pub(super) async fn invalidate_shared_at(&self, key: &K, version: u64) -> Result<(), Error> {
        let backend = |message: String| Error::Backend {
            cache: self.policy.name().clone(),
            message,
        };
        let drop_here = || {
            self.flights.invalidate(key);
            self.store.invalidate(key);
            self.forget_error(key);
        };
        let Some(tier) = self.tier() else {
            drop_here();
            return Err(backend(
                "no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into(),
            ));
        };
        let entry = match tier.entry_key(key) {
            Ok(entry) => entry,
            Err(error) => {
                drop_here();
                return Err(backend(format!("the key cannot be written for the shared store ({error}); applied in this process only")));
            }
        };
        match tier.remote.invalidate_at(entry.clone(), version).await {
            Ok(Invalidated::Fenced { .. }) => {
                drop_here();
                tier.noticed(entry.value());
                Ok(())
            }
            Ok(Invalidated::Late) => Ok(()),
            Err(error) => {
                drop_here();
                tier.noticed(entry.value());
                Err(backend(format!("{error}; applied in this process and queued, to be replayed before this replica reads the shared store again")))
            }
        }
    }
}

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// This cache's part of `invalidate_all` on the shared store.
    pub(super) async fn invalidate_all_shared(&self) -> Result<(), Error> {
        let Some(tier) = self.invalidation_tier()? else {
            return Ok(());
        };
        tier.invalidate_all().await.map(drop).map_err(|error| {
            self.backend_error(format!("{error}; applied in this process; entries the shared store listed and could not take are queued, and if it could not list them call again"))
        })
    }
}

/// Keeps a cache's memory copies in line with the shared store: a notice from another
/// replica drops the copy it names; a lost (or lagging) subscription drops every copy, and
/// so does subscribing again, since notices sent in between were missed.
pub(super) async fn listen<K, V, E>(
    inner: Weak<Inner<K, V, E>>,
    mut events: broadcast::Receiver<StoreEvent>,
) where
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
                    inner.forget_error(&key);
                }
            }
            Ok(StoreEvent::SubscriptionLost | StoreEvent::Subscribed)
            | Err(RecvError::Lagged(_)) => {
                tier.forget_copies();
                inner.store.invalidate_all();
                if let Some(known) = &inner.known_errors {
                    known.clear();
                }
            }
            Err(RecvError::Closed) => return,
        }
    }
}
