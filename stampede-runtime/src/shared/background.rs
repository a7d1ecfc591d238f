//! The threads the shared store's own work runs on: heartbeats, the notice subscription
//! and its listeners, replays of what Redis could not take, lease releases, and the
//! Redis client's own connection tasks.
//!
//! That work must outlive whichever Tokio runtime a caller happened to be on when a
//! replica first connected. A task spawned there dies with it, silently: a replica whose
//! first calls ran in a short-lived runtime (a test's, a `block_on` at startup) would stop
//! hearing other replicas while still saying it is subscribed. So every replica in the
//! process spawns that work here, on a runtime of its own that lives as long as the
//! process. It has two worker threads: every notice a replica hears is read, parsed and
//! handed to its listeners here, and when a publish wakes the replicas of a process (or a
//! busy replica's connections all answer at once) one thread made the last of them wait
//! for all the others (at 64 replicas in one process, the wake-up p99 was 1.6 to 2.6 ms
//! on one thread, 1.55 to 1.8 ms on two, on a 2-core machine). Callers' own calls to
//! Redis still run in the callers' tasks (a hit never hops threads).
//!
//! A simulation of the fleet runs every replica, and this work with them, on its own
//! single-threaded runtime on simulated time instead ([`simulate_on`]).
use std::future::Future;
use std::sync::OnceLock;
use tokio::runtime::{Handle, Runtime};

/// The store's runtime, started on first use (or the simulation's, on its thread).
pub(crate) fn handle() -> Handle {
    #[cfg(feature = "simulation")]
    if let Some(simulation) = SIMULATION.with(|handle| handle.borrow().clone()) {
        return simulation;
    }
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .thread_name("stampede-store")
                .build()
                .expect("a Tokio runtime for the shared store's background work")
        })
        .handle()
        .clone()
}

#[cfg(feature = "simulation")]
thread_local! {
    static SIMULATION: std::cell::RefCell<Option<Handle>> = const { std::cell::RefCell::new(None) };
}

/// Runs the store's work on `runtime` (a simulation's current-thread runtime) for what
/// this thread starts from now on; `None` goes back to the background threads.
#[cfg(feature = "simulation")]
pub(crate) fn simulate_on(runtime: Option<Handle>) {
    SIMULATION.with(|handle| *handle.borrow_mut() = runtime);
}

/// Runs `task` on the background threads, whatever runtime (if any) the caller is on.
pub(crate) fn spawn<T>(task: T)
where
    T: Future<Output = ()> + Send + 'static,
{
    drop(handle().spawn(crate::task::boxed(task)));
}

/// Waits `duration` on these threads' clock: real time (a simulation's, in a simulation),
/// whatever clock the caller's runtime keeps. A wait that stands for real time (a hearing
/// lease running out on other replicas) would end at once on a test's paused clock.
pub(crate) async fn sleep(duration: std::time::Duration) {
    let (done, waited) = tokio::sync::oneshot::channel();
    spawn(async move {
        tokio::time::sleep(duration).await;
        let _ = done.send(());
    });
    let _ = waited.await;
}
