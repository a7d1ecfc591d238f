//! The hit path and the dispatch on what the lookup found: fresh (maybe an XFetch
//! refresh), stale (one refresh, the stale value now), or nothing servable (a miss, in
//! the leader mode the caller chose).
use super::*;

impl<K, V, E> Cache<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// Returns `key`'s value, loading it through `origin` when nothing servable is cached.
    ///
    /// **Detached mode**: the origin runs as its own Tokio task. A caller that times out or
    /// is dropped never cancels work others wait for, and the result still fills the cache.
    /// Stale-window and XFetch refreshes run in the background. A panicking origin gives
    /// every waiter [`Error::OriginPanicked`]. Outside a Tokio runtime it behaves like
    /// [`Cache::load_inline`].
    pub async fn load<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        self.load_keyed(key, move |_| origin()).await
    }

    /// [`Cache::load`] with an origin that receives the key: callers that moved their
    /// inputs into the key get them back from it, so a hit clones nothing.
    pub async fn load_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        match self.lookup(&key) {
            Lookup::Fresh(value) => Ok(value),
            Lookup::Load(found) => self.load_found(key, found, origin).await,
        }
    }

    /// The hit path: a lookup and a timestamp compare; the value moves out. Synchronous,
    /// so a caller can answer a fresh hit before it builds the future of a load; anything
    /// else is handed on whole, so the load does not look up again.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: &K) -> Lookup<V> {
        let inner = &self.inner;
        let now = inner.clock.now();
        match inner.store.get_shared(key) {
            Some(current) if current.state(now) == State::Fresh && !current.rearmed => {
                // Drawn once: the load acts on this draw, never on a second one.
                let early = inner.refresh_early(&current, now);
                if early {
                    return Lookup::Load(Unanswered {
                        current: Some(current),
                        now,
                        early,
                    });
                }
                inner.counters.fresh_hits.bump();
                Lookup::Fresh(current.value.clone())
            }
            current => Lookup::Load(Unanswered {
                current,
                now,
                early: false,
            }),
        }
    }

    /// [`Cache::lookup`] for a function that returns a `Result`: the fresh answer comes
    /// wrapped, so generated code returns it as it is.
    #[doc(hidden)]
    #[inline(always)]
    pub fn lookup_answer(&self, key: &K) -> Lookup<Result<V, E>, V> {
        match self.lookup(key) {
            Lookup::Fresh(value) => Lookup::Fresh(Ok(value)),
            Lookup::Load(found) => Lookup::Load(found),
        }
    }

    /// [`Cache::lookup`] for a function that returns a plain value.
    #[doc(hidden)]
    #[inline(always)]
    pub fn lookup_value(&self, key: &K) -> Lookup<V> {
        self.lookup(key)
    }

    /// [`Cache::load_keyed`] after a [`lookup`](Self::lookup) that found no plain fresh
    /// hit.
    #[doc(hidden)]
    pub async fn load_found<F, Fut>(&self, key: K, found: Unanswered<V>, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut + Send + 'static,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
    {
        let inner = &self.inner;
        let Unanswered {
            current,
            now,
            early,
        } = found;
        let seen = match current {
            Some(current) => match current.state(now) {
                State::Fresh => {
                    inner.count_hit(&current, now);
                    if early {
                        let origin = bind(origin, &key);
                        Box::pin(self.refresh_detached(key, &current, origin, true)).await;
                    }
                    return Ok(current.value.clone());
                }
                State::Stale => {
                    inner.count_stale(&current, now);
                    let origin = bind(origin, &key);
                    Box::pin(self.refresh_detached(key, &current, origin, false)).await;
                    return Ok(current.value.clone());
                }
                State::Expired => Some(current.generation),
            },
            None => None,
        };
        let origin = bind(origin, &key);
        if !inner.policy.enabled() {
            // Nothing is ever stored, so every call of a disabled cache arrives here.
            return Box::pin(inner.call_direct(origin)).await;
        }
        inner.counters.misses.bump();
        // Boxed: the miss path's state stays off the stack of every hit.
        Box::pin(inner.within_deadline(&key, self.miss_detached(key.clone(), seen, origin))).await
    }

    /// Returns `key`'s value, loading it through `origin` when nothing servable is cached.
    ///
    /// **Inline mode with takeover**, for origins that borrow: the leading caller runs the
    /// origin in its own task. If that caller is dropped (say, by its deadline) or panics,
    /// one waiter takes over and calls the origin. A stale-window or XFetch refresh runs in
    /// the caller that triggers it, while every other caller keeps getting the current
    /// value.
    pub async fn load_inline<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.load_inline_keyed(key, move |_| origin()).await
    }

    /// [`Cache::load_inline`] with an origin that receives the key.
    pub async fn load_inline_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        match self.lookup(&key) {
            Lookup::Fresh(value) => Ok(value),
            Lookup::Load(found) => self.load_inline_found(key, found, origin).await,
        }
    }

    /// [`Cache::load_inline_keyed`] after a [`lookup`](Self::lookup) that found no plain
    /// fresh hit.
    #[doc(hidden)]
    pub async fn load_inline_found<F, Fut>(
        &self,
        key: K,
        found: Unanswered<V>,
        origin: F,
    ) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        let Unanswered {
            current,
            now,
            early,
        } = found;
        let seen = match current {
            Some(current) => match current.state(now) {
                State::Fresh => {
                    inner.count_hit(&current, now);
                    if !early {
                        return Ok(current.value.clone());
                    }
                    let origin = bind(origin, &key);
                    return Box::pin(self.refresh_inline(key, &current, origin, true)).await;
                }
                State::Stale => {
                    inner.count_stale(&current, now);
                    let origin = bind(origin, &key);
                    return Box::pin(self.refresh_inline(key, &current, origin, false)).await;
                }
                State::Expired => Some(current.generation),
            },
            None => None,
        };
        let origin = bind(origin, &key);
        if !inner.policy.enabled() {
            return Box::pin(inner.call_direct(origin)).await;
        }
        inner.counters.misses.bump();
        Box::pin(inner.within_deadline(&key, self.miss_inline(key.clone(), seen, origin))).await
    }
}

/// What [`Cache::lookup`] found: a fresh answer, already counted, or what a load goes on
/// from. For generated code, which answers a fresh hit without building a load.
#[doc(hidden)]
pub enum Lookup<A, V = A> {
    /// A fresh answer that needs nothing more: return it.
    Fresh(A),
    /// Anything else (stale, expired, absent, fresh with an early refresh due, or a
    /// fail-safe fallback): hand it to the load ([`Unanswered::load`]).
    Load(Unanswered<V>),
}

/// What a lookup that was not a plain fresh hit found, when.
#[doc(hidden)]
pub struct Unanswered<V> {
    current: Option<Arc<Envelope<V>>>,
    now: Instant,
    /// XFetch's draw for a fresh value: refresh it early.
    early: bool,
}

impl<K, V, E> Inner<K, V, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    pub(super) fn count_hit(&self, envelope: &Envelope<V>, now: Instant) {
        if envelope.rearmed {
            self.count_stale(envelope, now);
        } else {
            self.counters.fresh_hits.bump();
        }
    }

    /// Off the fresh-hit path: a value served in place of a fresh one, and how old it was.
    #[cold]
    pub(super) fn count_stale(&self, envelope: &Envelope<V>, now: Instant) {
        self.counters.stale_hits.bump();
        self.counters.oldest_stale_served.record(envelope.age(now));
    }

    /// Caching is off for this function: the origin, directly, every time.
    pub(super) async fn call_direct<F, Fut>(&self, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.counters.origin_calls.bump();
        origin().await
    }

    /// Inlined, so a hit of a cache without XFetch pays one compare, not a call.
    #[inline(always)]
    pub(super) fn refresh_early(&self, envelope: &Envelope<V>, now: Instant) -> bool {
        match self.policy.xfetch_beta() {
            // A fallback served by the fail-safe waits for its throttle, not for XFetch.
            Some(beta) if !envelope.rearmed => xfetch_draw(envelope, now, beta),
            _ => false,
        }
    }
}

/// XFetch's draw for a fresh value: refresh it now?
fn xfetch_draw<V>(envelope: &Envelope<V>, now: Instant, beta: f64) -> bool {
    xfetch::should_refresh_early(
        envelope.fresh_until.saturating_duration_since(now),
        envelope.delta,
        beta,
        xfetch::draw_u(),
    )
}

/// An origin that receives the key, as one that does not: the key is cloned here, on a
/// miss or refresh, never on a hit.
pub(super) fn bind<K: Clone, F, Fut>(origin: F, key: &K) -> impl FnOnce() -> Fut
where
    F: FnOnce(&K) -> Fut,
{
    let key = key.clone();
    move || origin(&key)
}
