use super::*;
use crate::flight::Join;
use crate::{Cache, Policy};
use std::time::Duration;

/// A detached miss boxes its load's future (which its caller drives, and which becomes a
/// task of its own when the caller stops waiting): what every miss of a churning cache
/// allocates and copies. The shared store's steps, the admission queue and
/// a refresh's current value are boxed (only where they are used), and no `async` level
/// keeps a second copy of the load's arguments; this keeps it that way.
#[test]
fn a_detached_loads_future_stays_within_512_bytes() {
    let policy = Policy::builder("future-size")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u64, u64> = Cache::new(policy);
    let inner = cache.inner.clone();
    let Join::Leader(leader) = inner.flights.join(&1) else {
        unreachable!("nobody else loads")
    };
    let origin = bind(|key: &u64| std::future::ready(Ok(*key)), &1);
    let purpose = Purpose::Miss { detached: true };
    let load = inherit(detached(inner.clone(), 1, leader, origin, purpose));
    let size = std::mem::size_of_val(&load);
    assert!(size <= 512, "a detached load's future is {size} bytes");
}

/// A detached miss that its caller waits out is run by that caller: no task is spawned
/// (and none woken from another thread), the cost that made churn a multiple of moka's.
/// One that its caller stops waiting for goes on as a task of its own and fills the cache.
#[tokio::test(flavor = "current_thread")]
async fn a_detached_miss_runs_in_its_caller_until_the_caller_stops_waiting() {
    let policy = Policy::builder("driven-by-its-caller")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u64, u64> = Cache::new(policy);
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    let during = cache
        .load(1, move || async move { Ok(tasks() as u64) })
        .await
        .unwrap();
    assert_eq!(during as usize, before, "no task was spawned for the load");

    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let origin = {
        let (started, release) = (started.clone(), release.clone());
        move || async move {
            started.notify_one();
            release.notified().await;
            Ok(2)
        }
    };
    let gave_up = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::select! {
            _ = cache.load(2, origin) => unreachable!("the origin waits to be released"),
            () = started.notified() => {}
        }
    });
    gave_up.await.unwrap();
    assert_eq!(tasks(), before + 1, "the abandoned load goes on as a task");
    release.notify_one();
    let stored = tokio::time::timeout(Duration::from_secs(5), async {
        while cache.peek(&2).is_none() {
            tokio::task::yield_now().await;
        }
    });
    stored.await.expect("the abandoned load filled the cache");
    assert_eq!(cache.load(2, || async { Ok(0) }).await.unwrap(), 2);
}
