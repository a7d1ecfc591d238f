//! A cache's steps on the shared store: connecting on first use, reading before the
//! origin, publishing under the read's fence, what memory keeps, invalidating, and the
//! notice listener that keeps memory copies in line with the store.
use super::*;

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

    /// What the shared store holds for `key`, counted.
    pub(super) async fn find_shared(&self, key: &K) -> Option<Found<V>> {
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
    pub(super) async fn write_shared(
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

    /// The shared side of [`Cache::invalidate`].
    pub(super) async fn invalidate_shared(&self, key: &K) -> Result<(), Error> {
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
