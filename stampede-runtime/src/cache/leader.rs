//! The two leader modes, as types the load is generic over ([`Runner`]): how the leader's
//! steps run (as their own task, or in the leading caller) and what the caller that
//! triggered a refresh is answered. Everything else about a load is one path (`load.rs`).
//!
//! - [`Detached`]: the leading caller drives the leader's steps while it waits, and they
//!   become a Tokio task of their own when it stops waiting ([`Handoff`]), so no caller's
//!   cancellation stops work others wait for; an origin's panic is caught and shared as
//!   [`Error::OriginPanicked`]; a refresh runs in the background.
//! - [`Inline`]: the leader's steps run in the leading caller's task, for origins that
//!   borrow; if that caller is dropped or panics, its flight is abandoned and one waiter
//!   takes over (see `flight`). A refresh runs in the caller that triggers it, within
//!   the caller's deadline.
//!
//! Also here: the task-local list of flights a task leads, which turns a load that waits
//! for itself into [`Error::Recursive`] instead of a hang.
use super::load::Purpose;
use super::{Inner, LoadLeader};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::deadline;
use crate::envelope::Envelope;
use crate::error::Error;
use crate::flight::{Outcome, Waiter};
use futures_util::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tracing::Instrument;

/// How a leader runs a load: [`Detached`] or [`Inline`]. `F` is the caller's origin.
pub(crate) trait Runner<K: CacheKey, V: LocalValue, E: CacheError, F> {
    /// Runs the leader's steps of a miss led by `leader`; the leading caller's answer.
    fn miss(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        origin: F,
    ) -> impl Future<Output = Result<V, E>>;

    /// Runs a refresh of `current` led by `leader`; the answer of the caller that
    /// triggered it (`current` itself, unless an inline refresh gives a newer value).
    fn refresh(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        current: Envelope<V>,
        origin: F,
        early: bool,
    ) -> impl Future<Output = Result<V, E>>;
}

/// A detached load's origin, boxed: the load's code (its steps, its task) is compiled once
/// per cache type instead of once per origin, that is per cached function and per
/// `Cache::load` call site. Boxed on the way to a load only, never on a hit; the
/// allocations (and a clone of the key) are a miss's least cost.
///
/// It takes its key by value: a boxed `FnOnce(&K)` is a higher-ranked type, and the
/// compiler cannot prove a load's future that holds one `Send`.
type Origin<K, V, E> = Box<dyn FnOnce(K) -> OriginFuture<V, E> + Send>;

type OriginFuture<V, E> = Pin<Box<dyn Future<Output = Result<V, E>> + Send>>;

/// `origin` boxed (see [`Origin`]), as the `FnOnce(&K)` a load takes.
pub(crate) fn boxed<K, V: 'static, E: 'static, F, Fut>(
    origin: F,
) -> impl FnOnce(&K) -> OriginFuture<V, E> + Send + 'static + use<K, V, E, F, Fut>
where
    K: Clone + Send + 'static,
    F: FnOnce(&K) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
{
    keyed::<K, V, E>(Box::new(move |key| Box::pin(origin(&key))))
}

/// A boxed origin as an `FnOnce(&K)`: one closure type per cache type, made outside
/// [`boxed`] so that it does not depend on the origin's type.
fn keyed<K: Clone, V, E>(origin: Origin<K, V, E>) -> impl FnOnce(&K) -> OriginFuture<V, E> + Send {
    move |key| origin(key.clone())
}

/// The leader's steps outlive their callers (see the module's documentation).
pub(crate) struct Detached;

/// The leader's steps in the leading caller's task (see the module's documentation).
pub(crate) struct Inline;

impl<K, V, E, F, Fut> Runner<K, V, E, F> for Detached
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: FnOnce(&K) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
{
    async fn miss(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        origin: F,
    ) -> Result<V, E> {
        // Only a shared store answers the callers of a miss before its load ends (a stale
        // value there, served while the load refreshes it): the leading caller listens
        // for that beside the load.
        let early = inner.shared.is_some().then(|| leader.waiter());
        let origin = bind(origin, &key);
        let purpose = Purpose::Miss { detached: true };
        let load = inherit(detached(inner.clone(), key, leader, origin, purpose));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No Tokio runtime to hand it to: this caller runs it to the end.
            return Box::pin(load).await;
        };
        // Boxed, as the task it may become: the load is most of a waiting caller's memory
        // otherwise.
        let load = Handoff {
            load: Some(Box::pin(load)),
            runtime,
        };
        match early {
            None => load.await,
            Some(waiter) => first_answer(load, waiter, inner).await,
        }
    }

    async fn refresh(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        current: Envelope<V>,
        origin: F,
        early: bool,
    ) -> Result<V, E> {
        let answer = Ok(current.value.clone());
        let origin = bind(origin, &key);
        // Nobody waits for a background refresh, so it runs outside the flights its caller
        // leads: an origin it calls may wait for them without forming a cycle.
        let purpose = Purpose::refresh(current, early);
        let refresh = detached(inner.clone(), key, leader, origin, purpose);
        if let Err(task) = spawn(refresh.instrument(tracing::Span::current())) {
            let _ = Box::pin(task).await;
        }
        answer
    }
}

impl<K, V, E, F, Fut> Runner<K, V, E, F> for Inline
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: FnOnce(&K) -> Fut,
    Fut: Future<Output = Result<V, E>>,
{
    /// A panic or cancellation here drops `leader` unsettled, and a waiter takes over.
    async fn miss(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        origin: F,
    ) -> Result<V, E> {
        let origin = bind(origin, &key);
        let purpose = Purpose::Miss { detached: false };
        (inner.lead(key, leader, || origin().map(Called::Returned), purpose)).await
    }

    /// A refresh that fails or overruns the caller's deadline leaves `current` as the
    /// answer.
    async fn refresh(
        inner: &Arc<Inner<K, V, E>>,
        key: K,
        leader: LoadLeader<K, V, E>,
        current: Envelope<V>,
        origin: F,
        early: bool,
    ) -> Result<V, E> {
        let answer = current.value.clone();
        let origin = bind(origin, &key);
        let purpose = Purpose::refresh(current, early);
        let refresh = inner.lead(key, leader, || origin().map(Called::Returned), purpose);
        let refreshed = match inner.policy.timeout() {
            Some(limit) => deadline::within(limit, refresh).await,
            None => Some(refresh.await),
        };
        match refreshed {
            Some(Ok(value)) => Ok(value),
            _ => Ok(answer),
        }
    }
}

/// What an origin call came to: its result, or a panic a detached flight caught.
pub(super) enum Called<V, E> {
    Returned(Result<V, E>),
    Panicked,
}

/// Counts an origin that unwinds through an inline load as a refresh error (a detached
/// load catches the panic and counts it where it publishes).
pub(super) struct CountPanic<'a>(pub(super) &'a crate::stats::Counter);

impl Drop for CountPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.bump();
        }
    }
}

/// The leader's steps of a detached load, the origin's panic caught and shared as an
/// error. Owns everything, so it can be its own task; not an `async fn`, which would hold
/// a second copy of its arguments beside the steps' own.
fn detached<K, V, E, F, Fut>(
    inner: Arc<Inner<K, V, E>>,
    key: K,
    leader: LoadLeader<K, V, E>,
    origin: F,
    purpose: Purpose<V>,
) -> impl Future<Output = Result<V, E>>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<V, E>>,
{
    let origin = || {
        AssertUnwindSafe(async move { origin().await })
            .catch_unwind()
            .map(|called| called.map_or(Called::Panicked, Called::Returned))
    };
    inner.lead(key, leader, origin, purpose)
}

/// An origin that receives the key, as one that does not: the key is cloned here, on a
/// miss or refresh, never on a hit.
pub(super) fn bind<K: Clone, F, Fut>(origin: F, key: &K) -> impl FnOnce() -> Fut + use<K, F, Fut>
where
    F: FnOnce(&K) -> Fut,
{
    let key = key.clone();
    move || origin(&key)
}

tokio::task_local! {
    /// The flights whose origin the current task is running, innermost last.
    static LEADING: Vec<u64>;
}

/// Whether the current task runs the origin of flight `id` (directly or further out).
pub(super) fn leads(id: u64) -> bool {
    LEADING
        .try_with(|leading| leading.contains(&id))
        .unwrap_or(false)
}

/// A task started on the caller's behalf keeps the flights the caller leads. (Its tracing
/// span it keeps without help: the load's span is opened, as a child of the caller's,
/// when [`Inner::lead`] is called, before the task is spawned, and the load's steps and
/// the origin run inside it.)
fn inherit<T: Future>(task: T) -> impl Future<Output = T::Output> {
    let leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    LEADING.scope(leading, task)
}

/// A detached miss's load, run by its leading caller while that caller waits for it:
/// no task to spawn and no wake-up from another task, the cost of a miss that nobody
/// abandons. A caller that stops waiting (its deadline passed, it was dropped, or a stale
/// value answered it) drops this, and what is left of the load becomes a task of its own:
/// no caller's cancellation stops work others wait for, and the result still fills the
/// cache.
struct Handoff<T>
where
    T: Future + Send + 'static,
    T::Output: Send + 'static,
{
    /// `None` once the load has ended.
    load: Option<Pin<Box<T>>>,
    runtime: tokio::runtime::Handle,
}

impl<T> Future for Handoff<T>
where
    T: Future + Send + 'static,
    T::Output: Send + 'static,
{
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        let Some(load) = self.load.as_mut() else {
            unreachable!("a load polled after it ended");
        };
        let answer = std::task::ready!(load.as_mut().poll(cx));
        self.load = None;
        Poll::Ready(answer)
    }
}

impl<T> Drop for Handoff<T>
where
    T: Future + Send + 'static,
    T::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(load) = self.load.take() {
            drop(self.runtime.spawn(crate::task::boxed(load)));
        }
    }
}

/// The leading caller's answer when a shared store may answer it before the load ends:
/// the load's own, or the flight's when that comes first (the rest of the load then goes
/// on as its own task, as [`Handoff`] does).
fn first_answer<K, V, E, T>(
    mut load: Handoff<T>,
    mut waiter: Waiter<Result<V, E>>,
    inner: &Arc<Inner<K, V, E>>,
) -> impl Future<Output = Result<V, E>> + '_
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    T: Future<Output = Result<V, E>> + Send + 'static,
{
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(answer) = Pin::new(&mut load).poll(cx) {
            return Poll::Ready(answer);
        }
        Pin::new(&mut waiter).poll(cx).map(|outcome| match outcome {
            Outcome::Done(answer) => answer,
            Outcome::Abandoned => Err(inner.fail(Error::Aborted {
                cache: inner.policy.name().clone(),
            })),
        })
    })
}

/// Runs `task` as its own Tokio task, or hands it back when there is no runtime to run it.
fn spawn<T>(task: T) -> Result<(), T>
where
    T: Future + Send + 'static,
    T::Output: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            drop(runtime.spawn(crate::task::boxed(task)));
            Ok(())
        }
        Err(_) => Err(task),
    }
}

/// Runs an origin as the leader of flight `id`.
pub(super) fn within_leader<T: Future>(id: u64, origin: T) -> impl Future<Output = T::Output> {
    let mut leading = LEADING.try_with(Vec::clone).unwrap_or_default();
    leading.push(id);
    LEADING.scope(leading, origin)
}

#[cfg(test)]
mod tests;
