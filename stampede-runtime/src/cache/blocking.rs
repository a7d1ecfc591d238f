//! Loads for callers that are threads, not tasks: a plain `fn` under `#[cached]`.
//!
//! A blocking load is an inline load (see [`Cache::load_inline`]) driven to its end on
//! the calling thread, which parks while it waits. So threads share flights with each
//! other and with async callers of the same cache: one origin call per key at a time, the
//! fresh and stale windows, jitter, XFetch and the counters all apply. A thread that finds
//! a load of its key running blocks until that load's flight settles; if the leading thread's
//! origin panics, the panic reaches that thread and one waiting thread takes over and
//! calls the origin. What needs a runtime of its own does not happen: a stale-window or
//! XFetch refresh runs in the thread that triggers it (every other thread gets the
//! current value at once), and outside a Tokio runtime no deadline is kept.
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::cache::{Cache, Inline, Lookup};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Returns `key`'s value, loading it through the blocking `origin` when nothing
    /// servable is cached; the calling thread waits for a load of its key that is running
    /// (see the module's documentation above for what applies).
    ///
    /// Call it from threads, not from async tasks: waiting parks the whole thread.
    pub fn load_blocking<F>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>,
    {
        // A fresh hit is answered before a waker is made (an allocation) for the load.
        match self.lookup(&key) {
            Lookup::Fresh(value) => Ok(value),
            Lookup::Load(found) => {
                block_on(self.load_found::<Inline, _, _>(key, found, move |key| {
                    std::future::ready(origin(key))
                }))
            }
        }
    }

    /// [`Cache::refresh`] for callers that are threads: the blocking `origin` is called
    /// whatever the cache holds, and what it returns is stored.
    pub fn refresh_blocking<F>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Result<V, E>,
    {
        block_on(self.refresh_keyed(key, move |key| std::future::ready(origin(key))))
    }
}

/// Wakes the parked thread that drives a blocking load.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives `future` on this thread, parked while it is pending. A spurious unpark only
/// costs one more poll.
fn block_on<T>(future: impl Future<Output = T>) -> T {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}

#[cfg(test)]
mod tests;
