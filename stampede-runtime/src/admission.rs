//! Origin admission: named semaphores that bound how many loads, of any key of any cache
//! naming them, call the origin at once, and shed a load that queues past `queue_timeout`.
//!
//! Coalescing stops one key's herd; a flush makes thousands of *different* keys miss at
//! once, and only a limit across keys keeps the origin alive then. Only a flight's leader
//! queues here, right before its origin call, so waiters of a key never hold a permit and
//! a limit of N means N origin calls, not N callers.
use crate::deadline;
use crate::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One named semaphore of a runtime.
#[derive(Debug)]
pub(crate) struct Admission {
    name: Arc<str>,
    limit: usize,
    queue_timeout: Duration,
    permits: Arc<Semaphore>,
}

impl Admission {
    pub(crate) fn new(name: Arc<str>, limit: usize, queue_timeout: Duration) -> Self {
        Admission {
            name,
            limit,
            queue_timeout,
            permits: Arc::new(Semaphore::new(limit)),
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }

    /// Origin calls holding a permit right now.
    #[cfg(feature = "metrics")]
    pub(crate) fn in_use(&self) -> usize {
        self.limit - self.permits.available_permits()
    }

    /// A permit, or `None` once `queue_timeout` passed in the queue (fair: first come,
    /// first admitted). Where no timer can run (no Tokio runtime, or one without its time
    /// driver) the timeout cannot be kept, so the caller queues until a permit frees.
    pub(crate) async fn enter(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        let queued = self.permits.clone().acquire_owned();
        let permit = deadline::within(self.queue_timeout, queued).await?;
        // The semaphore is never closed, so acquiring cannot fail otherwise.
        permit.ok()
    }
}

/// How one cache's loads are admitted to the origin.
#[derive(Debug)]
pub(crate) enum Gate {
    /// No admission semaphore: loads call the origin at once.
    Open,
    /// Through this semaphore.
    Limited(Arc<Admission>),
    /// Never: the configuration is broken (an undefined admission name, an invalid file),
    /// and every load fails with this error instead of running with settings nobody chose.
    Closed(Error),
}

impl Gate {
    /// The semaphore's limit, when there is one.
    pub(crate) fn limit(&self) -> Option<usize> {
        match self {
            Gate::Limited(admission) => Some(admission.limit()),
            Gate::Open | Gate::Closed(_) => None,
        }
    }
}

#[cfg(test)]
mod tests;
