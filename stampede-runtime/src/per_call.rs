//! One call of a cached function that skips the cache ([`bypass`]) or refreshes it
//! ([`refresh`]), like the `cached` crate's `_no_cache` and `force_refresh`, or whose
//! loads carry a priority of their own ([`priority`]).
//!
//! The choice travels in a thread-local for the span of one poll: the wrapper sets it
//! before the first poll of the call it wraps, and the cached function takes it (and so
//! clears it) as the first thing its body does, which happens in that first poll. A cached
//! function that this call's origin calls in turn finds it cleared and behaves as usual,
//! and so does any other task polled later on that thread.
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// How one call treats the cache.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallMode {
    /// As configured.
    Cached,
    /// The origin, directly: nothing is read or stored.
    Bypass,
    /// The origin, whatever the cache holds, and its value stored.
    Refresh,
    /// One key of a `batch` function, through its single-key door: gathered with the
    /// other single keys of the window.
    Single,
}

thread_local! {
    static NEXT: Cell<CallMode> = const { Cell::new(CallMode::Cached) };
}

/// The mode this call was wrapped in (and `Cached` for the next one). One thread-local
/// read on the hit path.
#[doc(hidden)]
#[inline]
pub fn take_call_mode() -> CallMode {
    NEXT.with(|next| match next.get() {
        CallMode::Cached => CallMode::Cached,
        _ => next.replace(CallMode::Cached),
    })
}

/// A call of a cached function under a [`CallMode`]; see [`bypass`] and [`refresh`].
#[must_use = "a wrapped call does nothing until awaited"]
pub struct PerCall<F: Future> {
    call: Pin<Box<F>>,
    mode: Option<CallMode>,
}

impl<F: Future> Future for PerCall<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(mode) = self.mode.take() else {
            return self.call.as_mut().poll(cx);
        };
        NEXT.with(|next| next.set(mode));
        let polled = self.call.as_mut().poll(cx);
        // Not taken (the call was not a cached function): it must not reach another.
        NEXT.with(|next| next.set(CallMode::Cached));
        polled
    }
}

/// One key of a `batch` function, from the single-key function the attribute writes
/// beside it (`batch(ids, single = price)`).
#[doc(hidden)]
pub fn single<F: Future>(call: F) -> PerCall<F> {
    PerCall {
        call: Box::pin(call),
        mode: Some(CallMode::Single),
    }
}

/// Runs one call of a `#[cached]` async function without the cache: its origin is called,
/// nothing is read from or stored in the cache, and no load is joined:
/// `stampede::bypass(load_user(7)).await`. Wrapping anything else does nothing.
pub fn bypass<F: Future>(call: F) -> PerCall<F> {
    PerCall {
        call: Box::pin(call),
        mode: Some(CallMode::Bypass),
    }
}

/// Runs one call of a `#[cached]` async function as a forced refresh: its origin is
/// called whatever the cache holds, and what it returns is stored (see
/// [`Cache::refresh`](crate::Cache::refresh)): `stampede::refresh(load_user(7)).await`.
pub fn refresh<F: Future>(call: F) -> PerCall<F> {
    PerCall {
        call: Box::pin(call),
        mode: Some(CallMode::Refresh),
    }
}

/// [`bypass`] for a `#[cached]` plain `fn`: `stampede::bypass_blocking(|| load_config(7))`.
pub fn bypass_blocking<T>(call: impl FnOnce() -> T) -> T {
    with_mode(CallMode::Bypass, call)
}

/// [`refresh`] for a `#[cached]` plain `fn`: `stampede::refresh_blocking(|| load_config(7))`.
pub fn refresh_blocking<T>(call: impl FnOnce() -> T) -> T {
    with_mode(CallMode::Refresh, call)
}

fn with_mode<T>(mode: CallMode, call: impl FnOnce() -> T) -> T {
    /// Clears the mode when the call returns or unwinds.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            NEXT.with(|next| next.set(CallMode::Cached));
        }
    }
    NEXT.with(|next| next.set(mode));
    let _clear = Clear;
    call()
}

tokio::task_local! {
    /// The priority [`priority`] gives the loads under it.
    static PRIORITY: crate::Priority;
}

/// A future whose loads carry a priority of their own; see [`priority`].
pub type Prioritized<F> = tokio::task::futures::TaskLocalFuture<crate::Priority, F>;

/// Runs `call` with `priority` for every load it leads, over the cache's own priority
/// (see [`Priority`](crate::Priority)): `stampede::priority(Priority::Low,
/// load_report(7)).await`. A call that finds a fresh value is answered as usual; one that
/// leads a load (a miss, a stale-window or XFetch refresh) takes its admission permit at
/// `priority`, even when the load goes on after the caller stops waiting. A call that
/// joins another caller's load waits for it at that caller's priority: it takes no
/// permit. [`Cache::load`](crate::Cache::load) calls inside it carry it too, and so do
/// cached functions the origins call while the call waits for them (not from a refresh
/// that runs on after the call was answered).
pub fn priority<F: Future>(priority: crate::Priority, call: F) -> Prioritized<F> {
    PRIORITY.scope(priority, call)
}

tokio::task_local! {
    /// Set by [`acknowledged`] for the writes under it.
    static ACKNOWLEDGED: ();
}

/// A future whose writes wait for acknowledgements; see [`acknowledged`].
pub type Acknowledged<F> = tokio::task::futures::TaskLocalFuture<(), F>;

/// Runs `call` with every invalidation and insert it makes waiting as
/// [`Consistency::Acknowledged`](crate::Consistency) does, whatever its cache's setting:
/// `stampede::acknowledged(LOAD_PROFILE.invalidate(&key)).await` returns once every tiered
/// replica that may hold a copy of the key has dropped it. Under faults (a replica that
/// cannot reach Redis, or cannot hear it) only a cache whose consistency is
/// `Acknowledged` also keeps other replicas from answering with what they loaded before:
/// see the fleet guide.
pub fn acknowledged<F: Future>(call: F) -> Acknowledged<F> {
    ACKNOWLEDGED.scope((), call)
}

/// Whether the current task runs under [`acknowledged`]: read once per write.
pub(crate) fn acknowledging() -> bool {
    ACKNOWLEDGED.try_with(|()| ()).is_ok()
}

/// The priority the current task's [`priority`] set, if any: read once per load led,
/// never on a hit.
pub(crate) fn current_priority() -> Option<crate::Priority> {
    PRIORITY.try_with(|priority| *priority).ok()
}
