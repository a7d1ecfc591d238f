//! Warmup: keys preloaded through a cache's origin and admission limit, failures reported
//! rather than fatal, and a cached function's cache reached through its handle.
use crate::common;

use common::{bounded, AppError, Origin};
use stampede::{cached, warmup, Cache, Clock, Policy, Runtime};
use std::time::Duration;

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn warmup_loads_every_key_and_reports_the_failures() {
    let policy = Policy::builder("warm").fresh(60_000 * MS).build().unwrap();
    let cache: Cache<u32, u32, AppError> = Cache::builder(policy).clock(Clock::tokio()).build();
    let origin = Origin::default();
    let calls = origin.clone();
    let report = bounded(warmup(&cache, 0..20, move |key| {
        let origin = calls.clone();
        async move {
            let call = origin.slow(10 * MS).await;
            if key % 5 == 0 {
                Err(AppError::Down(call))
            } else {
                Ok(key * 10)
            }
        }
    }))
    .await;
    assert_eq!((report.loaded, report.failed), (16, 4));
    let mut failed: Vec<u32> = report.errors.iter().map(|(key, _)| *key).collect();
    failed.sort_unstable();
    assert_eq!(failed, [0, 5, 10, 15]);
    assert!(report
        .errors
        .iter()
        .all(|(_, error)| matches!(error, AppError::Down(_))));
    assert_eq!(origin.calls(), 20);
    assert_eq!(cache.peek(&7), Some(70));
    assert_eq!(cache.peek(&5), None, "failures are not cached");
    assert_eq!(
        origin.max_running(),
        16,
        "the default batch without admission"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warmup_stays_within_the_admission_limit_and_is_never_shed_by_itself() {
    // A queue timeout far shorter than the warmup: only batching by the limit avoids
    // shedding keys that wait behind earlier ones.
    let runtime = Runtime::builder()
        .admission("db", 3, Duration::from_millis(5))
        .build()
        .unwrap();
    let policy = Policy::builder("warm-limited")
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy).runtime(&runtime).build();
    let origin = Origin::default();
    let calls = origin.clone();
    let report = bounded(warmup(&cache, 0..30, move |_| {
        let origin = calls.clone();
        async move { Ok(origin.slow(Duration::from_millis(20)).await) }
    }))
    .await;
    assert_eq!((report.loaded, report.failed), (30, 0));
    assert_eq!((origin.calls(), origin.max_running()), (30, 3));
    let stats = cache.stats();
    assert_eq!((stats.admitted, stats.shed), (30, 0));
}

/// The cached function: its calls go through the cache its handle `NAME_OF` names.
#[cached(fresh = "60s", name = "names", skip(origin))]
async fn name_of(id: u32, origin: Origin) -> Result<String, AppError> {
    origin.slow(MS).await;
    Ok(format!("user {id}"))
}

#[tokio::test(start_paused = true)]
async fn warmup_reaches_a_cached_functions_cache_through_its_handle() {
    let origin = Origin::default();
    let calls = origin.clone();
    // The function's origin (what its body calls), not the cached function itself.
    let report = bounded(warmup(&NAME_OF.cache(), [1, 2, 3], move |id| {
        let origin = calls.clone();
        async move {
            origin.slow(MS).await;
            Ok(format!("user {id}"))
        }
    }))
    .await;
    assert_eq!((report.loaded, report.failed), (3, 0));
    assert_eq!(origin.calls(), 3);
    for id in [1, 2, 3] {
        assert_eq!(name_of(id, origin.clone()).await, Ok(format!("user {id}")));
    }
    assert_eq!(
        origin.calls(),
        3,
        "the function's calls hit what warmup loaded"
    );
    assert_eq!(NAME_OF.stats().fresh_hits, 3);
}
