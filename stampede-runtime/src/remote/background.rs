//! The thread the shared store's own work runs on: heartbeats, the notice subscription and
//! its listeners, replays of what Redis could not take, lease releases.
//!
//! That work must outlive whichever Tokio runtime a caller happened to be on when a
//! replica first connected. A task spawned there dies with it, silently: a replica whose
//! first calls ran in a short-lived runtime (a test's, a `block_on` at startup) would stop
//! hearing other replicas while still saying it is subscribed. So every replica in the
//! process spawns that work here, on one thread with a single-threaded runtime of its own
//! that lives as long as the process. Callers' own calls to Redis still run in the
//! callers' tasks (a hit never hops threads).
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::Handle;

/// The store's runtime, started on first use.
pub(crate) fn handle() -> &'static Handle {
    static HANDLE: OnceLock<Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("stampede-store")
            .build()
            .expect("a Tokio runtime for the shared store's background work");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("stampede-store".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("a thread for the shared store's background work");
        handle
    })
}

/// Runs `task` on the store's thread, whatever runtime (if any) the caller is on.
pub(crate) fn spawn<T>(task: T)
where
    T: Future<Output = ()> + Send + 'static,
{
    drop(handle().spawn(crate::task::boxed(task)));
}
