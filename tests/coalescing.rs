//! One origin call per key at a time: a hot key under hundreds of callers, a failing or
//! panicking leader (the next call retries), partial cancellation and takeover.
use crate::common;

use common::{bounded, callers_at_once, paused, AppError, Mode, Origin};
use stampede::{Cache, Error, Policy};
use std::time::Duration;

fn policy(fresh: Duration) -> Policy {
    Policy::builder("test").fresh(fresh).build().unwrap()
}

async fn five_hundred_callers_on_a_cold_key(mode: Mode) {
    let cache: Cache<u32, usize, AppError> = Cache::new(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let callers = callers_at_once(500, mode, &cache, &origin, Duration::from_millis(50), |_| 7);
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap(), Ok(1));
    }
    assert_eq!(origin.calls(), 1);
    let stats = cache.stats();
    assert_eq!(
        (
            stats.misses + stats.fresh_hits,
            stats.origin_calls,
            stats.in_flight
        ),
        (500, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_callers_on_a_cold_key_make_one_origin_call() {
    five_hundred_callers_on_a_cold_key(Mode::Detached).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_inline_callers_on_a_cold_key_make_one_origin_call() {
    five_hundred_callers_on_a_cold_key(Mode::Inline).await;
}

#[tokio::test(start_paused = true)]
async fn a_hot_key_that_expires_under_hundreds_of_callers_is_loaded_once() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(1)));
    let origin = Origin::default();
    let load = |cache: Cache<u32, usize, AppError>, origin: Origin| async move {
        cache
            .load(1, move || async move {
                Ok(origin.slow(Duration::from_millis(250)).await)
            })
            .await
    };
    assert_eq!(load(cache.clone(), origin.clone()).await, Ok(1));
    tokio::time::sleep(Duration::from_millis(1_001)).await; // past `fresh`, no stale window
    let callers: Vec<_> = (0..300)
        .map(|_| tokio::spawn(load(cache.clone(), origin.clone())))
        .collect();
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap(), Ok(2));
    }
    assert_eq!(origin.calls(), 2, "one call to fill, one per expiry");
    assert_eq!(cache.stats().coalesced, 299);
}

#[tokio::test(start_paused = true)]
async fn waiters_share_the_leaders_error_and_it_is_not_cached() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let failing = |cache: Cache<u32, usize, AppError>, origin: Origin| async move {
        cache
            .load(1, move || async move {
                let call = origin.slow(Duration::from_millis(100)).await;
                Err(AppError::Down(call))
            })
            .await
    };
    let callers: Vec<_> = (0..50)
        .map(|_| tokio::spawn(failing(cache.clone(), origin.clone())))
        .collect();
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap(), Err(AppError::Down(1)));
    }
    assert_eq!((origin.calls(), cache.stats().in_flight), (1, 0));
    // Not cached: the next call retries and succeeds.
    let ok = cache.load(1, || async { Ok(42) }).await;
    assert_eq!(ok, Ok(42));
    assert_eq!(cache.stats().refresh_errors, 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_detached_origin_fails_its_waiters_and_the_next_call_succeeds() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move {
                cache
                    .load(1, || async {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        panic!("origin bug")
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        let got = bounded(caller).await.unwrap();
        assert!(
            matches!(got, Err(AppError::Cache(Error::OriginPanicked { .. }))),
            "{got:?}"
        );
    }
    assert_eq!(cache.stats().in_flight, 0);
    assert_eq!(cache.load(1, || async { Ok(5) }).await, Ok(5));
}

#[tokio::test(start_paused = true)]
async fn an_inline_leader_that_panics_hands_the_key_to_one_waiter() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let leader = {
        let (cache, origin) = (cache.clone(), origin.clone());
        tokio::spawn(async move {
            cache
                .load_inline(1, || async {
                    origin.slow(Duration::from_millis(100)).await;
                    panic!("origin bug")
                })
                .await
        })
    };
    tokio::task::yield_now().await; // the leader joins first
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load_inline(1, || async {
                        Ok(origin.slow(Duration::from_millis(100)).await)
                    })
                    .await
            })
        })
        .collect();
    assert!(
        bounded(leader).await.unwrap_err().is_panic(),
        "the panic reaches the leader's caller"
    );
    for waiter in waiters {
        assert_eq!(bounded(waiter).await.unwrap(), Ok(2));
    }
    assert_eq!(
        origin.calls(),
        2,
        "the panicking leader, then one waiter taking over"
    );
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn nineteen_of_twenty_callers_dropped_the_last_gets_the_value_from_one_call() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load(1, move || async move {
                        Ok(origin.slow(Duration::from_millis(100)).await)
                    })
                    .await
            })
        })
        .collect();
    tokio::task::yield_now().await; // all twenty have joined; the first leads
    assert_eq!(cache.stats().coalesced, 19);
    let mut callers = callers.into_iter();
    let last = callers.next_back().unwrap();
    for dropped in callers {
        dropped.abort(); // the leader among them
    }
    assert_eq!(bounded(last).await.unwrap(), Ok(1));
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_inline_leader_dropped_mid_load_hands_the_key_to_a_waiter() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load_inline(1, || async {
                        Ok(origin.slow(Duration::from_millis(100)).await)
                    })
                    .await
            })
        })
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(cache.stats().coalesced, 19);
    let mut callers = callers.into_iter();
    let last = callers.next_back().unwrap();
    for dropped in callers {
        dropped.abort();
    }
    assert_eq!(
        bounded(last).await.unwrap(),
        Ok(2),
        "the leader's call was cancelled with it"
    );
    assert_eq!(origin.calls(), 2);
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cached_origin_may_call_another_cached_key_without_deadlock() {
    let cache: Cache<u32, u32, AppError> = paused(policy(Duration::from_secs(60)));
    let outer = cache.clone();
    let value = bounded(outer.load(1, move || async move {
        let inner = cache.load(2, || async { Ok(20) }).await?;
        Ok(inner + 1)
    }))
    .await;
    assert_eq!(value, Ok(21));
}

#[tokio::test(start_paused = true)]
async fn without_coalescing_every_concurrent_miss_calls_the_origin() {
    let policy = Policy::builder("t")
        .fresh(Duration::from_secs(60))
        .coalesce(false)
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = paused(policy);
    let origin = Origin::default();
    let callers: Vec<_> = (0..30)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load(1, move || async move {
                        Ok(origin.slow(Duration::from_millis(50)).await)
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        bounded(caller).await.unwrap().unwrap();
    }
    assert_eq!((origin.calls(), origin.max_running()), (30, 30));
}

#[tokio::test(start_paused = true)]
async fn without_coalescing_a_caller_past_its_deadline_still_lets_the_detached_load_land() {
    let policy = Policy::builder("t")
        .fresh(Duration::from_secs(60))
        .timeout(Duration::from_millis(10))
        .coalesce(false)
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = paused(policy);
    let origin = Origin::default();
    let slow = origin.clone();
    let first = cache
        .load(1, move || async move {
            Ok(slow.slow(Duration::from_millis(50)).await)
        })
        .await;
    assert!(
        matches!(first, Err(AppError::Cache(Error::Timeout { .. }))),
        "{first:?}"
    );
    common::loads_finished(&cache).await;
    let second = cache.load(1, || async { Ok(usize::MAX) }).await;
    assert_eq!(second, Ok(1), "the load the caller gave up on was cached");
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_during_a_load_is_not_undone_by_it() {
    let cache: Cache<u32, usize, AppError> = paused(policy(Duration::from_secs(60)));
    let origin = Origin::default();
    let first = {
        let (cache, origin) = (cache.clone(), origin.clone());
        tokio::spawn(async move {
            cache
                .load(1, move || async move {
                    Ok(origin.slow(Duration::from_millis(100)).await)
                })
                .await
        })
    };
    tokio::task::yield_now().await;
    cache.invalidate(&1).await.unwrap();
    assert_eq!(
        bounded(first).await.unwrap(),
        Ok(1),
        "its caller still gets the value"
    );
    assert_eq!(
        cache.peek(&1),
        None,
        "but it was not stored over the invalidation"
    );
    let o = origin.clone();
    assert_eq!(
        cache
            .load(1, move || async move { Ok(o.slow(Duration::ZERO).await) })
            .await,
        Ok(2)
    );
}
