//! The tasks this crate spawns, as one type.
//!
//! Tokio compiles its task machinery (the cell, the harness, the waker's vtable) once per
//! future type it spawns. A load's future is a different type for every origin, so
//! spawning each as it is would compile that machinery again for every cached function
//! and every `Cache::load` call site, in this crate's users as in its tests. Boxed first,
//! every spawned load and listener is one type: one more allocation per spawn, against
//! a build that compiles a fraction of the code.
use std::future::Future;
use std::pin::Pin;

/// A spawned future, whatever it was.
pub(crate) type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// `future` as a [`Task`], its output dropped.
pub(crate) fn boxed<T>(future: T) -> Task
where
    T: Future + Send + 'static,
{
    Box::pin(async move {
        drop(future.await);
    })
}
