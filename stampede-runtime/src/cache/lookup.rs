//! The public loads and the hit path: a lookup and a timestamp compare answer a fresh
//! value; anything else is handed whole to the load (`load.rs`), in the leader mode the
//! method names. The caller's deadline, which bounds a miss, is here too.
use super::leader::{boxed, Detached, Inline};
use super::{Cache, Inner};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::{Envelope, State};
use crate::error::Error;
use crate::{deadline, xfetch};
use futures_util::future::Either;
use futures_util::FutureExt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Returns `key`'s value, loading it through `origin` when nothing servable is cached.
    ///
    /// **Detached mode**: the origin outlives its callers. The leading caller runs the load
    /// while it waits (no task to spawn); when it stops waiting, what is left becomes a
    /// Tokio task of its own. A caller that times out or is dropped never cancels work
    /// others wait for, and the result still fills the cache. So the origin must not
    /// rely on the caller's task-locals (`tokio::task_local!`): it may finish without
    /// them.
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
            Lookup::Load(found) => {
                (self.load_found::<Detached, _, _>(key, found, boxed(origin))).await
            }
        }
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
            Lookup::Load(found) => self.load_found::<Inline, _, _>(key, found, origin).await,
        }
    }

    /// The hit path: a lookup and a timestamp compare; the value moves out. Synchronous,
    /// so a caller (generated code too) can answer a fresh hit before it builds the future
    /// of a load; anything else is handed on whole, so the load does not look up again.
    #[inline(always)]
    pub(crate) fn lookup(&self, key: &K) -> Lookup<V> {
        let inner = &self.inner;
        let now = inner.clock.now();
        match inner.memory.get_unchecked(key) {
            // A plain value (neither re-armed nor tagged): one compare of its marks.
            Some(current) if current.state(now) == State::Fresh && current.plain() => {
                inner.fresh(key, current, now)
            }
            held => inner.marked(key, held, now),
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// A fresh value found: served, unless XFetch draws an early refresh.
    #[inline(always)]
    fn fresh(&self, key: &K, current: Arc<Envelope<V>>, now: Instant) -> Lookup<V> {
        // Drawn once: the load acts on this draw, never on a second one.
        let early = self.refresh_early(&current, now);
        if early {
            return Lookup::Load(Unanswered {
                current: Some(current),
                now,
                early,
            });
        }
        if self.counters.fresh_hits.bump_sampled() {
            self.hot.sampled_hit(key);
        }
        Lookup::Fresh(current.value.clone())
    }

    /// Anything but a plain fresh value: a tagged one is served once its tags are found
    /// current (else it is gone), the rest is handed to the load.
    #[inline(never)]
    fn marked(&self, key: &K, held: Option<Arc<Envelope<V>>>, now: Instant) -> Lookup<V> {
        let current = held.filter(|held| self.memory.unless_retired(key, held));
        match current {
            Some(current) if current.state(now) == State::Fresh && !current.rearmed() => {
                self.fresh(key, current, now)
            }
            current => Lookup::Load(Unanswered {
                current,
                now,
                early: false,
            }),
        }
    }
}

/// What [`Cache::lookup`] found: a fresh answer, already counted, or what a load goes on
/// from. For generated code, which answers a fresh hit without building a load.
#[doc(hidden)]
pub enum Lookup<V> {
    /// A fresh answer that needs nothing more: return it.
    Fresh(V),
    /// Anything else (stale, expired, absent, fresh with an early refresh due, or a
    /// fail-safe fallback): hand it to the load.
    Load(Unanswered<V>),
}

/// What a lookup that was not a plain fresh hit found, when.
#[doc(hidden)]
pub struct Unanswered<V> {
    pub(super) current: Option<Arc<Envelope<V>>>,
    pub(super) now: Instant,
    /// XFetch's draw for a fresh value: refresh it early.
    pub(super) early: bool,
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    pub(super) fn count_hit(&self, key: &K, envelope: &Envelope<V>, now: Instant) {
        if envelope.rearmed() {
            self.count_stale(envelope, now);
        } else if self.counters.fresh_hits.bump_sampled() {
            self.hot.sampled_hit(key);
        }
    }

    /// Off the fresh-hit path: a value served in place of a fresh one, and how old it was.
    #[cold]
    pub(super) fn count_stale(&self, envelope: &Envelope<V>, now: Instant) {
        self.counters.stale_hits.bump();
        self.counters.oldest_stale_served.record(envelope.age(now));
    }

    /// Inlined, so a hit of a cache without XFetch pays one compare, not a call.
    #[inline(always)]
    pub(super) fn refresh_early(&self, envelope: &Envelope<V>, now: Instant) -> bool {
        match self.policy.xfetch_beta() {
            // A fallback served by the fail-safe waits for its throttle, not for XFetch.
            Some(beta) if !envelope.rearmed() => xfetch_draw(envelope, now, beta),
            _ => false,
        }
    }

    /// Caching is off for this function: the origin, directly, every time.
    pub(super) async fn call_direct<F, Fut>(&self, key: &K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.counters.origin_calls.bump();
        origin(key).await
    }

    /// Bounds a miss by the policy's deadline. A caller whose deadline passes gets the
    /// fail-safe value if there is one, else [`Error::Timeout`]; in detached mode the load
    /// goes on without it.
    pub(super) fn within_deadline<'a, M>(
        &'a self,
        key: &'a K,
        miss: M,
    ) -> impl Future<Output = Result<V, E>> + 'a
    where
        M: Future<Output = Result<V, E>> + 'a,
    {
        // Combinators, not an `async fn`: an async fn would hold `miss` twice (as its
        // argument and inside the timeout), doubling what every waiting caller carries.
        match self.policy.timeout() {
            Some(limit) => Either::Right(
                deadline::within(limit, miss)
                    .map(move |answer| answer.unwrap_or_else(|| self.past_deadline(key, limit))),
            ),
            None => Either::Left(miss),
        }
    }

    /// A caller's deadline passed: the fail-safe value if there is one, else a timeout.
    fn past_deadline(&self, key: &K, limit: Duration) -> Result<V, E> {
        self.counters.timeouts.bump();
        let now = self.clock.now();
        match self.last_good(key, now) {
            Some(last) => {
                self.count_stale(&last, now);
                Ok(last.value.clone())
            }
            None => Err(self.fail(Error::Timeout {
                cache: self.policy.name().clone(),
                after: limit,
            })),
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
