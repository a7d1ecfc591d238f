//! Deadlines where Tokio can keep them, and none where it cannot.
//!
//! Tokio's timer needs a runtime whose time driver is enabled; without a runtime, or in
//! one built without `enable_time()`, creating a timer panics. A cache must not turn its
//! caller's environment into a panic, so every deadline (a caller's `timeout`, an
//! admission queue's `queue_timeout`, an inline refresh's `timeout`) goes through
//! [`within`], which keeps no deadline there: the future simply runs to its end.
use futures_util::future::Either;
use futures_util::FutureExt;
use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

/// `future` bounded by `limit` (`None` once it passed), or unbounded where no timer can
/// run.
pub(crate) fn within<F: Future>(
    limit: Duration,
    future: F,
) -> impl Future<Output = Option<F::Output>> {
    if timer_available() {
        Either::Right(tokio::time::timeout(limit, future).map(Result::ok))
    } else {
        Either::Left(future.map(Some))
    }
}

/// Whether a Tokio timer can be created here. Tokio has no query for its time driver, so
/// this creates one and catches the panic, with the panic's message kept off stderr.
fn timer_available() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    quiet_probes();
    PROBING.with(|probing| probing.set(true));
    let made = std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok();
    PROBING.with(|probing| probing.set(false));
    made
}

thread_local! {
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// Chains a panic hook that stays silent for this thread's probe and hands every other
/// panic to the hook that was installed before.
fn quiet_probes() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !PROBING.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests;
