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
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_the_future_runs_without_a_deadline() {
        let answer = futures_util::future::ready(7);
        assert_eq!(
            futures_executor_free(within(Duration::ZERO, answer)),
            Some(7)
        );
    }

    #[test]
    fn without_the_time_driver_the_future_runs_without_a_deadline() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let answer = runtime.block_on(within(Duration::ZERO, async { 7 }));
        assert_eq!(answer, Some(7));
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_timer_the_deadline_holds() {
        let never = std::future::pending::<()>();
        assert_eq!(within(Duration::from_millis(5), never).await, None);
    }

    /// Polls a future that is ready at once, with no executor at all.
    fn futures_executor_free<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let waker = futures_util::task::noop_waker();
        match future
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
        {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the future was not ready"),
        }
    }
}
