//! A cache in an environment where Tokio cannot keep a deadline (no runtime at all, or a
//! runtime built without its time driver) keeps no deadline there, as documented, and
//! never panics.
use crate::common;

use common::{AppError, DEADLINE};
use stampede::{cached, Cache, Policy, Runtime};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Runs a future on this thread with no async runtime at all.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

fn without_timers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[cached(fresh = "60s", timeout = "1s")]
async fn outside_any_runtime(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[test]
fn a_call_with_a_timeout_outside_any_runtime_runs_without_a_deadline() {
    assert_eq!(block_on(outside_any_runtime(1)), Ok(1));
    assert_eq!(block_on(outside_any_runtime(1)), Ok(1));
    assert_eq!(OUTSIDE_ANY_RUNTIME.stats().origin_calls, 1);
}

#[cached(fresh = "60s", timeout = "1s")]
async fn without_time_driver(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[test]
fn a_call_with_a_timeout_in_a_runtime_without_timers_runs_without_a_deadline() {
    let runtime = without_timers();
    assert_eq!(runtime.block_on(without_time_driver(2)), Ok(2));
    assert_eq!(runtime.block_on(without_time_driver(2)), Ok(2));
    assert_eq!(WITHOUT_TIME_DRIVER.stats().origin_calls, 1);
}

#[test]
fn an_inline_stale_refresh_with_a_timeout_outside_any_runtime_does_not_panic() {
    let policy = Policy::builder("stale-outside")
        .fresh(Duration::from_millis(1))
        .stale(Duration::from_secs(600))
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::new(policy);
    let calls = AtomicUsize::new(0);
    let origin = || async { Ok(calls.fetch_add(1, Ordering::SeqCst) + 1) };
    assert_eq!(block_on(cache.load_inline(1, origin)), Ok(1));
    // Waits for the value to go stale on the cache's own clock, the coarse system clock
    // (the point of this test): its ticking thread may be descheduled for longer than any
    // fixed sleep on a loaded machine, and until it ticks past the fresh time a call is a
    // fresh hit that calls nothing. The first call that finds the value stale refreshes it
    // and answers the new value.
    let deadline = std::time::Instant::now() + DEADLINE;
    let answer = loop {
        let answer = block_on(cache.load_inline(1, origin));
        if cache.stats().stale_hits > 0 {
            break answer;
        }
        assert_eq!(answer, Ok(1), "a fresh hit");
        assert!(
            std::time::Instant::now() < deadline,
            "the value never went stale"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(answer, Ok(2), "refreshed inline");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(cache.stats().stale_hits, 1);
}

#[test]
fn an_admission_queue_in_a_runtime_without_timers_waits_for_a_permit() {
    let runtime = Runtime::builder()
        .admission("db", 1, Duration::from_millis(10))
        .build()
        .unwrap();
    let policy = Policy::builder("queued")
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy).runtime(&runtime).build();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let first = cache.load_inline(1, || async {
        released.await.unwrap();
        Ok(1)
    });
    let second = async {
        // Queues behind the first load's permit, then frees it.
        let queued = cache.load_inline(2, || async { Ok(2) });
        let mut queued = std::pin::pin!(queued);
        std::future::poll_fn(|cx| {
            assert!(
                queued.as_mut().poll(cx).is_pending(),
                "queued for the permit"
            );
            Poll::Ready(())
        })
        .await;
        release.send(()).unwrap();
        queued.await
    };
    let (first, second) = without_timers().block_on(async { tokio::join!(first, second) });
    assert_eq!((first, second), (Ok(1), Ok(2)));
    assert_eq!(cache.stats().shed, 0);
}

/// Drops, five times, a runtime whose caller's call to the store is still being judged
/// on the background threads (the store held its replies past the response timeout), then
/// waits out every judgement: prints how many panics any thread saw.
#[test]
#[ignore = "run by a_runtime_dropped_while_its_calls_are_judged_panics_nowhere, in a process of its own"]
fn child_drops_runtimes_while_their_calls_are_judged() {
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let panics = Arc::new(AtomicUsize::new(0));
    let counted = panics.clone();
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::SeqCst);
        report(info);
    }));
    for round in 0..5_u64 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let replica = Runtime::builder()
                .backend(stampede::Backend::redis(redis.url()))
                .build()
                .unwrap();
            let policy = Policy::builder("judged")
                .fresh(Duration::from_secs(60))
                .build()
                .unwrap();
            let cache: Cache<u64, u64, AppError> = Cache::builder(policy).runtime(&replica).build();
            // Connected and answering first, then held: the next call times out.
            let _ = cache.load(round, || async { Ok(1) }).await;
            redis.hold_replies();
            let _ = cache.load(round + 100, || async { Ok(2) }).await;
        });
        runtime.shutdown_timeout(Duration::from_millis(500));
        redis.heal();
    }
    // Every judgement's grace (four response timeouts) and the client's own timeout.
    std::thread::sleep(Duration::from_secs(3));
    println!("{}panics {}", common::REPORT, panics.load(Ordering::SeqCst));
}

#[test]
fn a_runtime_dropped_while_its_calls_are_judged_panics_nowhere() {
    if testkit::RedisServer::start().is_none() {
        return;
    }
    let lines = common::run_child(
        module_path!(),
        "child_drops_runtimes_while_their_calls_are_judged",
        &[],
    );
    assert_eq!(lines, ["panics 0"], "no thread panicked");
}
