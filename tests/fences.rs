//! Invalidation fences every load that started before it, coalesced or not, a miss or a
//! refresh; a load that awaits its own key fails instead of hanging; the counters match
//! what happened.
use crate::common;

use common::{bounded, loads_finished, paused, AppError};
use stampede::{Cache, Policy};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// An origin that returns its call number once the test lets it finish.
#[derive(Clone)]
struct Gated {
    calls: Arc<AtomicUsize>,
    started: Arc<Semaphore>,
    release: Arc<Semaphore>,
}

impl Gated {
    fn new() -> Self {
        Gated {
            calls: Arc::default(),
            started: Arc::new(Semaphore::new(0)),
            release: Arc::new(Semaphore::new(0)),
        }
    }

    async fn call(&self) -> Result<usize, AppError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        self.started.add_permits(1);
        self.release.acquire().await.unwrap().forget();
        Ok(n)
    }

    async fn until_started(&self) {
        bounded(self.started.acquire()).await.unwrap().forget();
    }

    fn finish_one(&self) {
        self.release.add_permits(1);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// A detached load of `key` through this origin.
    fn load(
        &self,
        cache: &Fenced,
        key: u32,
    ) -> impl Future<Output = Result<usize, AppError>> + use<> {
        let (cache, origin) = (cache.clone(), self.clone());
        async move {
            cache
                .load(key, move || async move { origin.call().await })
                .await
        }
    }

    /// A detached load of `key`, as its own task.
    fn spawn_load(&self, cache: &Fenced, key: u32) -> JoinHandle<Result<usize, AppError>> {
        tokio::spawn(self.load(cache, key))
    }

    /// An inline load of `key`, as its own task.
    fn spawn_load_inline(&self, cache: &Fenced, key: u32) -> JoinHandle<Result<usize, AppError>> {
        let (cache, origin) = (cache.clone(), self.clone());
        tokio::spawn(async move { cache.load_inline(key, || origin.call()).await })
    }
}

type Fenced = Cache<u32, usize, AppError>;

fn fresh_for_10s(name: &str) -> Policy {
    Policy::builder(name)
        .fresh(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn uncoalesced(stale: Duration) -> Policy {
    Policy::builder("fenced")
        .fresh(Duration::from_secs(10))
        .stale(stale)
        .coalesce(false)
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_uncoalesced_detached_miss_that_started_before_invalidate_is_not_stored() {
    let cache: Fenced = Cache::new(uncoalesced(Duration::ZERO));
    let origin = Gated::new();
    let load = origin.spawn_load(&cache, 1);
    origin.until_started().await;
    cache.invalidate(&1).await.unwrap();
    origin.finish_one();
    assert_eq!(
        bounded(load).await.unwrap(),
        Ok(1),
        "its caller still gets it"
    );
    assert_eq!(cache.peek(&1), None, "fenced out of the store");
    origin.finish_one();
    let next = origin.load(&cache, 1);
    assert_eq!(bounded(next).await, Ok(2), "the next call misses");
    assert_eq!(origin.calls(), 2);
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test]
async fn an_uncoalesced_inline_miss_that_started_before_invalidate_is_not_stored() {
    let cache: Fenced = Cache::new(uncoalesced(Duration::ZERO));
    let origin = Gated::new();
    let load = origin.spawn_load_inline(&cache, 1);
    origin.until_started().await;
    assert_eq!(
        cache.stats().in_flight,
        1,
        "an uncoalesced load is in flight"
    );
    cache.invalidate(&1).await.unwrap();
    origin.finish_one();
    assert_eq!(bounded(load).await.unwrap(), Ok(1));
    assert_eq!(cache.peek(&1), None);
    origin.finish_one();
    assert_eq!(bounded(cache.load_inline(1, || origin.call())).await, Ok(2));
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test(start_paused = true)]
async fn an_uncoalesced_stale_refresh_that_started_before_invalidate_is_not_stored() {
    let cache: Fenced = paused(uncoalesced(Duration::from_secs(60)));
    let origin = Gated::new();
    origin.finish_one();
    let first = origin.load(&cache, 1);
    assert_eq!(bounded(first).await, Ok(1));
    tokio::time::advance(Duration::from_secs(11)).await;
    // Stale: served at once, and a refresh starts in the background.
    let stale = origin.load(&cache, 1);
    assert_eq!(bounded(stale).await, Ok(1));
    origin.until_started().await; // the first call's permit
    origin.until_started().await; // the refresh's
    cache.invalidate(&1).await.unwrap();
    origin.finish_one();
    loads_finished(&cache).await;
    assert_eq!(cache.peek(&1), None, "the refresh was fenced out");
    origin.finish_one();
    let next = origin.load(&cache, 1);
    assert_eq!(bounded(next).await, Ok(3), "the next call misses");
}

#[tokio::test]
async fn invalidate_all_fences_a_coalesced_load_and_its_in_flight_count_returns_to_zero() {
    let policy = fresh_for_10s("fenced-all");
    let cache: Fenced = Cache::new(policy);
    let origin = Gated::new();
    let load = origin.spawn_load(&cache, 1);
    origin.until_started().await;
    cache.invalidate_all().await.unwrap();
    assert_eq!(cache.stats().in_flight, 1, "the detached load still runs");
    origin.finish_one();
    assert_eq!(bounded(load).await.unwrap(), Ok(1));
    loads_finished(&cache).await;
    assert_eq!(cache.peek(&1), None);
}

#[tokio::test]
async fn a_waiter_that_takes_over_is_coalesced_once() {
    let policy = fresh_for_10s("takeover");
    let cache: Fenced = Cache::new(policy);
    let origin = Gated::new();
    // An inline leader that is dropped mid-load hands the key to its waiter.
    let leader = origin.spawn_load_inline(&cache, 1);
    origin.until_started().await;
    let waiter = origin.spawn_load_inline(&cache, 1);
    common::eventually(|| cache.stats().coalesced == 1).await;
    leader.abort();
    origin.until_started().await; // the waiter took over
    origin.finish_one();
    assert_eq!(bounded(waiter).await.unwrap(), Ok(2));
    let stats = cache.stats();
    assert_eq!(
        (stats.coalesced, stats.origin_calls, stats.in_flight),
        (1, 2, 0)
    );
}

#[tokio::test]
async fn an_inline_origin_panic_counts_as_a_refresh_error() {
    let policy = fresh_for_10s("inline-panic");
    let cache: Fenced = Cache::new(policy);
    let panicked = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .load_inline(1, || async { panic!("origin down") })
                .await
        })
    };
    assert!(bounded(panicked).await.unwrap_err().is_panic());
    let stats = cache.stats();
    assert_eq!((stats.refresh_errors, stats.in_flight), (1, 0));
}

fn recursive_cache() -> Cache<u32, usize, AppError> {
    let policy = fresh_for_10s("recursive");
    Cache::new(policy)
}

#[tokio::test]
async fn a_detached_load_that_awaits_its_own_key_fails_instead_of_hanging() {
    let cache = recursive_cache();
    let inner = cache.clone();
    let outer = cache.load(1, move || async move {
        match inner.load(1, || async { Ok(7) }).await {
            Err(AppError::Cache(stampede::Error::Recursive { .. })) => Ok(0),
            other => panic!("expected a recursion error, got {other:?}"),
        }
    });
    assert_eq!(bounded(outer).await, Ok(0));
    loads_finished(&cache).await;
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test]
async fn an_inline_load_that_awaits_its_own_key_fails_instead_of_hanging() {
    let cache = recursive_cache();
    let outer = cache.load_inline(1, || async {
        match cache.load_inline(1, || async { Ok(7) }).await {
            Err(AppError::Cache(stampede::Error::Recursive { .. })) => Ok(0),
            other => panic!("expected a recursion error, got {other:?}"),
        }
    });
    assert_eq!(bounded(outer).await, Ok(0));
    assert_eq!(cache.stats().in_flight, 0);
}

#[tokio::test]
async fn a_load_that_awaits_its_key_through_another_cache_fails_instead_of_hanging() {
    let cache = recursive_cache();
    let middle: Cache<u32, usize, AppError> = Cache::new(fresh_for_10s("middle"));
    let (outer_cache, middle_cache) = (cache.clone(), middle.clone());
    let outer = cache.load(1, move || async move {
        let back = outer_cache.clone();
        middle_cache
            .load(
                2,
                move || async move { back.load(1, || async { Ok(7) }).await },
            )
            .await
    });
    assert!(matches!(
        bounded(outer).await,
        Err(AppError::Cache(stampede::Error::Recursive { .. }))
    ));
    loads_finished(&cache).await;
    loads_finished(&middle).await;
}

type Boxed = std::pin::Pin<Box<dyn Future<Output = Result<u64, AppError>> + Send>>;

/// An origin that calls its own function with its own key: the inner call must fail.
fn answer_of_inner_call(inner: Result<u64, AppError>) -> Result<u64, AppError> {
    match inner {
        Err(AppError::Cache(stampede::Error::Recursive { .. })) => Ok(0),
        other => panic!("expected a recursion error, got {other:?}"),
    }
}

#[stampede::cached(fresh = "60s")]
async fn calls_itself_detached(id: u64) -> Result<u64, AppError> {
    answer_of_inner_call(again_detached(id).await)
}

#[stampede::cached(fresh = "60s", mode = inline)]
async fn calls_itself_inline(id: u64) -> Result<u64, AppError> {
    answer_of_inner_call(again_inline(id).await)
}

// Outside the functions, so their futures' `Send` is not asked inside their own bodies.
fn again_detached(id: u64) -> Boxed {
    Box::pin(calls_itself_detached(id))
}

fn again_inline(id: u64) -> Boxed {
    Box::pin(calls_itself_inline(id))
}

#[tokio::test]
async fn a_cached_function_that_awaits_itself_on_its_key_fails_that_call_in_both_modes() {
    assert_eq!(bounded(calls_itself_detached(1)).await, Ok(0));
    assert_eq!(bounded(calls_itself_inline(1)).await, Ok(0));
    common::eventually(|| CALLS_ITSELF_DETACHED.stats().in_flight == 0).await;
    assert_eq!(CALLS_ITSELF_INLINE.stats().in_flight, 0);
    assert_eq!(CALLS_ITSELF_DETACHED.stats().origin_calls, 1);
    assert_eq!(CALLS_ITSELF_INLINE.stats().origin_calls, 1);
}

#[tokio::test]
async fn stats_count_the_values_memory_holds() {
    let cache: Cache<u32, u32, AppError> = Cache::new(fresh_for_10s("entries"));
    assert_eq!(cache.stats().entries, 0);
    for key in 0..3 {
        bounded(cache.load(key, move || async move { Ok(key) }))
            .await
            .unwrap();
    }
    assert_eq!(cache.stats().entries, 3);
    cache.invalidate(&1).await.unwrap();
    assert_eq!(
        cache.stats().entries,
        2,
        "an invalidated value is not counted"
    );
}

#[tokio::test(start_paused = true)]
async fn a_background_refresh_started_inside_a_load_may_wait_for_that_load() {
    let outer: Cache<u32, u32, AppError> = paused(fresh_for_10s("outer"));
    let inner: Cache<u32, u32, AppError> = paused(
        Policy::builder("inner")
            .fresh(Duration::from_millis(10))
            .stale(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    bounded(inner.load(1, || async { Ok(0) })).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await; // inner's value is stale now
    let gate = Arc::new(Semaphore::new(0));
    let refresh_started = Arc::new(Semaphore::new(0));
    let (outer2, gate2, started2, inner2) = (
        outer.clone(),
        gate.clone(),
        refresh_started.clone(),
        inner.clone(),
    );
    // The outer load reads the stale inner value, which starts inner's refresh in the
    // background; that refresh loads the outer key, which is still loading.
    let outer3 = outer2.clone();
    let load = tokio::spawn(async move {
        outer2
            .load(1, move || async move {
                let stale = inner2
                    .load(1, move || async move {
                        started2.add_permits(1);
                        outer_value(&outer3).await
                    })
                    .await?;
                let _ = gate2.acquire().await;
                Ok(stale + 40)
            })
            .await
    });
    let _ = bounded(refresh_started.acquire()).await;
    gate.add_permits(1);
    assert_eq!(bounded(load).await.unwrap(), Ok(40));
    common::loads_finished(&inner).await;
    assert_eq!(
        inner.stats().refresh_errors,
        0,
        "the refresh waited for the outer load instead of failing as recursive"
    );
    assert_eq!(inner.peek(&1), Some(41));
}

async fn outer_value(outer: &Cache<u32, u32, AppError>) -> Result<u32, AppError> {
    Ok(outer.load(1, || async { Ok(0) }).await? + 1)
}
