//! How one call to Redis is made: through its master's breaker, under the response
//! timeout, retried once after a connection error, and judged.
//!
//! Each call runs under the response timeout (default 250 ms) on top of the client's own,
//! because the client's reconnect attempts can otherwise outlast it. A connection error is
//! retried once within the same deadline: after an outage the first command may get the
//! old connection's error while the next one works. Every script is safe to send twice: a
//! read names its lease by the replica's token and gets it back.
//!
//! A call whose deadline passes fails its caller at once, but the call itself is finished
//! on the background threads for a grace of [`LATE_GRACE`] response timeouts more: an answer
//! in that time is a late answer (a slow moment, a starved client) and the breaker counts
//! the call as a success; no answer is a failure. So a healthy server read late never
//! puts the replica into degraded mode, and a black hole still opens the breaker, a grace
//! later.
//!
//! A call given up on may still send more: a script the server had forgotten is sent again
//! in full after its `NOSCRIPT`. So a release waits for the calls given up on before it
//! ([`LateCalls`]): were it sent at once, it could reach the server between the two and
//! find nothing to release, and the late read's grant would then hold its lease to the end.
use super::background;
use super::breaker::{Breaker, Pass};
use super::connection::Connection;
use super::{bump, Client, Counters};
use crate::shared::keys::EntryKey;
use crate::shared::store::StoreError;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::Notify;

/// How many response timeouts a timed-out call may still answer in and count as alive.
pub(super) const LATE_GRACE: u32 = 4;

impl Client {
    /// Runs one call on the master owning `key`'s slot (see [`Client::call_through`]).
    pub(super) async fn call<T, F, Fut>(&self, key: &EntryKey, attempt: F) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let (_, breaker) = self.shards.for_key(key.value());
        self.call_through(&breaker, attempt).await
    }

    /// Runs one call through `breaker` (its master's), under the response timeout,
    /// retrying once on a connection error while time remains. A failure that points at
    /// a setting (a refused password, a missing permission, an untrusted certificate) is
    /// the store's problem (see [`super::diagnosis`]).
    pub(super) async fn call_through<T, F, Fut>(
        &self,
        breaker: &Arc<Breaker>,
        attempt: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.call_judged(breaker, attempt, true).await
    }

    /// [`Client::call_through`] for a command the store can do without (`CONFIG GET`,
    /// `CLIENT SETNAME`): its refusal is the caller's to handle, not a problem.
    pub(super) async fn call_optional<T, F, Fut>(
        &self,
        breaker: &Arc<Breaker>,
        attempt: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.call_judged(breaker, attempt, false).await
    }

    /// Longer than a screen: every call to Redis passes here, and the breaker's verdict on each
    /// way a call can end (refused, no master, answered, failed, late) is kept beside that
    /// ending.
    async fn call_judged<T, F, Fut>(
        &self,
        breaker: &Arc<Breaker>,
        attempt: F,
        required: bool,
    ) -> Result<T, StoreError>
    where
        F: Fn(Connection) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        // Refused calls are not errors of Redis: the breaker's state and time degraded
        // account for them.
        let Some(pass) = breaker.pass() else {
            return Err(StoreError::Unavailable);
        };
        let timeout = self.config.response_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        if self.connection().is_none() {
            // No master known yet: ask the Sentinels, within this call's deadline.
            match tokio::time::timeout_at(deadline, self.follow_master()).await {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    pass.failed(&error.to_string());
                    return Err(error);
                }
                Err(_) => {
                    pass.failed("no Sentinel named the master in time");
                    return Err(StoreError::Timeout(timeout));
                }
            }
        }
        let moves = self.moves.load(Ordering::Relaxed);
        let Some(connection) = self.connection() else {
            pass.failed("no master to call");
            return Err(StoreError::Unavailable);
        };
        let mut call = Box::pin(OnStore::new(attempt(connection)));
        let mut answer = tokio::time::timeout_at(deadline, &mut call).await;
        if matches!(&answer, Ok(Err(e)) if unusable(e)) && tokio::time::Instant::now() < deadline {
            // Again, on the connection of the moment (the master may have moved).
            let Some(connection) = self.connection() else {
                pass.failed("no master to call");
                return Err(StoreError::Unavailable);
            };
            call = Box::pin(OnStore::new(attempt(connection)));
            answer = tokio::time::timeout_at(deadline, &mut call).await;
        }
        match answer {
            Ok(Ok(value)) => {
                pass.succeeded();
                Ok(value)
            }
            Ok(Err(e)) => {
                bump(&self.counters.errors);
                if required {
                    self.problems.judge(&e);
                }
                if unusable(&e) {
                    // A master the Sentinels name may have moved: ask them now.
                    self.follow_now.notify_one();
                    // A failure of the master followed before is no verdict on this one.
                    if self.moves.load(Ordering::Relaxed) == moves {
                        pass.failed(&e.to_string());
                    }
                } else {
                    // Redis answered (out of memory, a script error, a slot in motion):
                    // the server is up, whatever the call came to.
                    pass.succeeded();
                }
                Err(StoreError::Backend(e.to_string()))
            }
            Err(_) => {
                bump(&self.counters.errors);
                let grace = timeout * LATE_GRACE;
                let late = self.late.begin();
                background::spawn(judge_late(call, pass, grace, self.counters.clone(), late));
                Err(StoreError::Timeout(timeout))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A call polled inside the store's runtime, wherever its caller is: the timers the
    /// client makes on the way (its own response timeout) belong to that runtime. A call
    /// whose caller gives up is judged on the background threads ([`judge_late`]); a timer it
    /// had made on the caller's runtime would panic once that runtime shut down.
    struct OnStore<F> {
        store: tokio::runtime::Handle,
        #[pin]
        call: F,
    }
}

impl<F> OnStore<F> {
    fn new(call: F) -> Self {
        OnStore {
            store: background::handle(),
            call,
        }
    }
}

impl<F: Future> Future for OnStore<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        let _store = this.store.enter();
        this.call.poll(cx)
    }
}

/// Waits out a call its caller gave up on: answered within `grace`, the server is alive
/// and the client was late; otherwise the call failed.
async fn judge_late<T>(
    call: Pin<Box<impl Future<Output = RedisResult<T>> + Send>>,
    pass: Pass,
    grace: std::time::Duration,
    counters: Arc<Counters>,
    _late: LateCall,
) {
    // Given up on past its grace, the call is dropped here and sends nothing more; `_late`
    // ends with it.
    match tokio::time::timeout(grace, call).await {
        Ok(Err(e)) if unusable(&e) => pass.failed(&e.to_string()),
        Ok(_) => {
            counters.late_answers.fetch_add(1, Ordering::Relaxed);
            pass.succeeded();
        }
        Err(_) => pass.failed("no answer within the response timeout and its grace"),
    }
}

/// The calls given up on whose late part still runs (see [`judge_late`]), numbered in the
/// order they were given up.
#[derive(Default)]
pub(super) struct LateCalls {
    running: Mutex<Running>,
    ended: Notify,
}

#[derive(Default)]
struct Running {
    next: u64,
    numbers: BTreeSet<u64>,
}

/// One call given up on, until its late part ends (answered, failed, or dropped past its
/// grace).
pub(super) struct LateCall {
    calls: Arc<LateCalls>,
    number: u64,
}

impl LateCalls {
    fn running(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin(self: &Arc<Self>) -> LateCall {
        let mut running = self.running();
        let number = running.next;
        running.next += 1;
        running.numbers.insert(number);
        LateCall {
            calls: self.clone(),
            number,
        }
    }

    /// Waits until every call given up on before now has ended: at most a grace of
    /// [`LATE_GRACE`] response timeouts, as none runs longer. Calls given up on later are
    /// not waited for, so a steady stream of them cannot hold the caller.
    pub(super) async fn ended_before_now(&self) {
        let horizon = self.running().next;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let oldest = self.running().numbers.first().copied();
            if oldest.is_none_or(|oldest| oldest >= horizon) {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for LateCall {
    fn drop(&mut self) {
        self.calls.running().numbers.remove(&self.number);
        self.calls.ended.notify_waiters();
    }
}

/// Whether `error` says the shard cannot be used now: anything but Redis answering with
/// an error of its own. A connection that failed, a node the client cannot reach, or a
/// node that cannot serve (a dead master's slots, a failover, a restart loading its data)
/// is unusable; out of memory, a script error or a slot in motion is an answer.
pub(super) fn unusable(error: &RedisError) -> bool {
    let answered = match error.kind() {
        ErrorKind::Server(kind) => !matches!(
            kind,
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        ),
        // An error code the client does not know (`OOM`, say), or a reply of a shape it
        // did not expect: the server is up.
        ErrorKind::Extension | ErrorKind::UnexpectedReturnType => true,
        _ => false,
    };
    !answered || error.is_io_error() || error.is_connection_dropped() || error.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::LateCalls;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_release_waits_for_the_calls_given_up_before_it_and_no_later_ones() {
        let calls = Arc::new(LateCalls::default());
        // None running: no wait.
        tokio::time::timeout(Duration::from_millis(1), calls.ended_before_now())
            .await
            .expect("nothing to wait for");

        let (first, second) = (calls.begin(), calls.begin());
        let waited = Arc::new(AtomicBool::new(false));
        let waiter = tokio::spawn({
            let (calls, waited) = (calls.clone(), waited.clone());
            async move {
                calls.ended_before_now().await;
                waited.store(true, Ordering::SeqCst);
            }
        });
        // Given up on after the wait began: not waited for.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let later = calls.begin();
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(second);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waited.load(Ordering::SeqCst), "the first call still runs");
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("the wait ends with the last call before it")
            .expect("the waiter does not panic");
        assert!(waited.load(Ordering::SeqCst));
        drop(later);
    }
}
