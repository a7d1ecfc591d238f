//! `load_timeout`, the origin call's own deadline: a hung origin is abandoned, its callers
//! answered (by the stale or fail-safe value where one may stand in, else
//! `Error::LoadTimeout`), its admission permit returned and, on a shared store, its lease
//! given back, so nothing a hung call holds is held for longer than the deadline.
use crate::common;

use common::{bounded, patient_replica, AppError};
use stampede::{Backend, Cache, Clock, Error, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::RedisServer;

const LIMIT: Duration = Duration::from_millis(200);

/// An origin that never answers the first `hangs` calls, and answers `calls` after.
#[derive(Clone, Default)]
struct Hanging {
    calls: Arc<AtomicUsize>,
}

impl Hanging {
    async fn call(&self, hangs: usize) -> Result<usize, AppError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if call <= hangs {
            std::future::pending::<()>().await;
        }
        Ok(call)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

fn is_load_timeout(result: &Result<usize, AppError>) -> bool {
    matches!(
        result,
        Err(AppError::Cache(Error::LoadTimeout { after, .. })) if *after == LIMIT
    )
}

#[tokio::test(start_paused = true)]
async fn a_hung_origin_is_abandoned_and_its_callers_get_load_timeout() {
    let policy = Policy::builder("hung-miss")
        .fresh(Duration::from_secs(60))
        .load_timeout(LIMIT)
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy).clock(Clock::tokio()).build();
    let origin = Hanging::default();
    let callers: Vec<_> = (0..5)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load(1, move || async move { origin.call(1).await })
                    .await
            })
        })
        .collect();
    for caller in callers {
        let answer = bounded(caller).await.unwrap();
        assert!(is_load_timeout(&answer), "{answer:?}");
    }
    let stats = cache.stats();
    assert_eq!(
        (stats.origin_calls, stats.load_timeouts, stats.in_flight),
        (1, 1, 0)
    );
    // Nothing was stored: the next call loads anew.
    let origin_again = origin.clone();
    let again = cache
        .load(1, move || async move { origin_again.call(1).await })
        .await;
    assert_eq!(again, Ok(2));
    assert_eq!(origin.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_refresh_leaves_the_stale_value_and_returns_its_permit() {
    let runtime = Runtime::builder()
        .admission("db", 1, Duration::from_secs(3600))
        .build()
        .unwrap();
    let policy = Policy::builder("hung-refresh")
        .fresh(Duration::from_secs(1))
        .stale(Duration::from_secs(60))
        .load_timeout(LIMIT)
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy)
        .clock(Clock::tokio())
        .runtime(&runtime)
        .build();
    let origin = Hanging::default();
    let load = |key: u32, hangs: usize| {
        let (cache, origin) = (cache.clone(), origin.clone());
        async move {
            cache
                .load(key, move || async move { origin.call(hangs).await })
                .await
        }
    };
    assert_eq!(load(1, 0).await, Ok(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Stale: answered at once, and refreshed by an origin call that hangs.
    assert_eq!(bounded(load(1, 2)).await, Ok(1));
    tokio::time::sleep(LIMIT * 2).await;
    let stats = cache.stats();
    assert_eq!((stats.load_timeouts, stats.in_flight), (1, 0), "{stats:?}");
    // The only permit came back with the abandoned refresh: another key loads at once
    // (the queue would otherwise wait an hour).
    assert_eq!(bounded(load(2, 0)).await, Ok(3));
    // The stale value still stands, and the next refresh is a new one.
    assert_eq!(bounded(load(1, 0)).await, Ok(1));
    tokio::time::sleep(LIMIT).await;
    assert_eq!(bounded(load(1, 0)).await, Ok(4));
}

/// On a shared store a hung holder's lease is given back when its load is abandoned, so
/// another replica's miss loads at once instead of waiting out a lease of a minute held
/// by a replica that is alive and beating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_load_gives_its_lease_back_to_the_fleet() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..2)
        .map(|_| patient_replica(Backend::redis(redis.url())))
        .collect();
    let caches: Vec<Cache<u32, usize, AppError>> = replicas
        .iter()
        .map(|runtime| {
            let policy = Policy::builder("hung-lease")
                .fresh(Duration::from_secs(60))
                .lease(Duration::from_secs(60))
                .load_timeout(LIMIT)
                .build()
                .unwrap();
            Cache::builder(policy).runtime(runtime).build()
        })
        .collect();
    let origin = Hanging::default();
    let first = {
        let (cache, origin) = (caches[0].clone(), origin.clone());
        tokio::spawn(async move {
            cache
                .load(1, move || async move { origin.call(1).await })
                .await
        })
    };
    // The first replica holds the lease, its origin hung.
    common::eventually(|| origin.calls() == 1).await;
    let started = std::time::Instant::now();
    let second = {
        let origin = origin.clone();
        caches[1].load(1, move || async move { origin.call(1).await })
    };
    assert_eq!(bounded(second).await, Ok(2));
    assert!(is_load_timeout(&bounded(first).await.unwrap()));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the second replica waited {:?} for a lease its holder had abandoned",
        started.elapsed()
    );
    assert_eq!(caches[0].stats().load_timeouts, 1);
    assert_eq!(origin.calls(), 2);
}
