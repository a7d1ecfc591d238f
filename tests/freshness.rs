//! Fresh, stale and expired values; deadlines; fail-safe; XFetch; jitter: an origin
//! slower than every deadline, and nothing served past the stale window. Time is Tokio's
//! paused clock, so every duration here is exact.
use crate::common;

use common::{bounded, loads_finished, paused, AppError, Origin};
use stampede::{Cache, Error, Policy};
use std::time::Duration;
use tokio::time::sleep;

const MS: Duration = Duration::from_millis(1);

type Shared = Cache<u32, usize, AppError>;

fn call(
    cache: &Shared,
    origin: &Origin,
    latency: Duration,
) -> impl std::future::Future<Output = Result<usize, AppError>> + use<> {
    let (cache, origin) = (cache.clone(), origin.clone());
    async move {
        cache
            .load(1, move || async move { Ok(origin.slow(latency).await) })
            .await
    }
}

fn failing(
    cache: &Shared,
    origin: &Origin,
) -> impl std::future::Future<Output = Result<usize, AppError>> {
    let (cache, origin) = (cache.clone(), origin.clone());
    async move {
        cache
            .load(1, move || async move {
                Err(AppError::Down(origin.slow(10 * MS).await))
            })
            .await
    }
}

/// moka's own expiry, which frees dead entries, runs on real time: under a paused clock it
/// must not drop a value the cache's clock still deems fresh.
#[tokio::test(start_paused = true)]
async fn a_paused_clock_keeps_a_fresh_value_however_long_real_time_runs() {
    let policy = Policy::builder("t").fresh(20 * MS).build().unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, MS).await, Ok(1));
    // Real time well past the policy's longest life; the cache's clock has not moved.
    std::thread::sleep(100 * MS);
    assert_eq!(cache.stats().entries, 1, "still in memory");
    assert_eq!(call(&cache, &origin, MS).await, Ok(1), "a fresh hit");
    assert_eq!(origin.calls(), 1);
    sleep(20 * MS).await;
    assert_eq!(
        call(&cache, &origin, MS).await,
        Ok(2),
        "expired by its clock"
    );
}

#[tokio::test(start_paused = true)]
async fn in_the_stale_window_callers_get_the_old_value_at_once_while_one_refresh_runs() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale(10_000 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 100 * MS).await, Ok(1));
    sleep(1_500 * MS).await;
    let started = tokio::time::Instant::now();
    let callers: Vec<_> = (0..200)
        .map(|_| tokio::spawn(call(&cache, &origin, 100 * MS)))
        .collect();
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap(), Ok(1), "the stale value");
    }
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "nobody waited for the refresh"
    );
    loads_finished(&cache).await; // the background refresh
    assert_eq!(call(&cache, &origin, 100 * MS).await, Ok(2));
    assert_eq!(origin.calls(), 2, "one fill, one refresh");
    assert_eq!(cache.stats().stale_hits, 200);
}

#[tokio::test(start_paused = true)]
async fn an_inline_stale_refresh_runs_in_one_caller_while_the_rest_get_the_old_value() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale(10_000 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    let inline = |cache: Shared, origin: Origin| async move {
        cache
            .load_inline(1, || async { Ok(origin.slow(100 * MS).await) })
            .await
    };
    assert_eq!(inline(cache.clone(), origin.clone()).await, Ok(1));
    sleep(1_500 * MS).await;
    let callers: Vec<_> = (0..50)
        .map(|_| tokio::spawn(inline(cache.clone(), origin.clone())))
        .collect();
    let answers: Vec<_> = {
        let mut answers = Vec::new();
        for caller in callers {
            answers.push(bounded(caller).await.unwrap().unwrap());
        }
        answers
    };
    assert_eq!(
        answers.iter().filter(|&&v| v == 2).count(),
        1,
        "the refreshing caller"
    );
    assert_eq!(answers.iter().filter(|&&v| v == 1).count(), 49);
    assert_eq!(origin.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn past_the_stale_window_no_value_is_served() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale(1_000 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(1));
    sleep(2_001 * MS).await;
    assert_eq!(cache.peek(&1), None);
    // The origin fails: the caller fails, the dead value is not served.
    assert_eq!(failing(&cache, &origin).await, Err(AppError::Down(2)));
    // The origin works: the caller waits for the new value.
    let started = tokio::time::Instant::now();
    assert_eq!(call(&cache, &origin, 300 * MS).await, Ok(3));
    assert_eq!(started.elapsed(), 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_slow_origin_times_callers_out_yet_its_value_is_still_cached() {
    let policy = Policy::builder("t")
        .fresh(60_000 * MS)
        .timeout(50 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    let callers: Vec<_> = (0..20)
        .map(|_| tokio::spawn(call(&cache, &origin, 500 * MS)))
        .collect();
    let started = tokio::time::Instant::now();
    for caller in callers {
        let got = bounded(caller).await.unwrap();
        assert!(
            matches!(got, Err(AppError::Cache(Error::Timeout { after, .. })) if after == 50 * MS),
            "{got:?}"
        );
    }
    assert_eq!(started.elapsed(), 50 * MS, "bounded waiting");
    loads_finished(&cache).await; // the detached load finishes on its own
    assert_eq!(cache.peek(&1), Some(1));
    assert_eq!(origin.calls(), 1);
    assert_eq!(cache.stats().timeouts, 20);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_caller_gets_the_last_value_under_stale_if_error() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale_if_error(60_000 * MS)
        .timeout(50 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(1));
    sleep(5_000 * MS).await; // expired, but within the fail-safe bound
    assert_eq!(
        call(&cache, &origin, 500 * MS).await,
        Ok(1),
        "the last value, after 50 ms"
    );
    loads_finished(&cache).await;
    assert_eq!(
        call(&cache, &origin, 500 * MS).await,
        Ok(2),
        "the slow load still landed"
    );
}

#[tokio::test(start_paused = true)]
async fn stale_if_error_serves_the_last_value_and_throttles_retries() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale_if_error(60_000 * MS)
        .fail_safe_throttle(5_000 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(1));
    sleep(2_000 * MS).await;
    assert_eq!(
        failing(&cache, &origin).await,
        Ok(1),
        "the origin failed; the last value stands in"
    );
    for _ in 0..100 {
        assert_eq!(failing(&cache, &origin).await, Ok(1));
    }
    assert_eq!(origin.calls(), 2, "no retries within the throttle");
    sleep(5_000 * MS).await;
    assert_eq!(failing(&cache, &origin).await, Ok(1));
    assert_eq!(origin.calls(), 3, "one retry per throttle");
    sleep(60_000 * MS).await; // past fresh + stale_if_error
    assert_eq!(failing(&cache, &origin).await, Err(AppError::Down(4)));
    let stats = cache.stats();
    assert_eq!((stats.fallbacks, stats.refresh_errors), (2, 3));
}

#[tokio::test(start_paused = true)]
async fn a_failed_stale_refresh_keeps_serving_the_stale_value() {
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .stale(10_000 * MS)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(1));
    sleep(2_000 * MS).await;
    assert_eq!(failing(&cache, &origin).await, Ok(1));
    loads_finished(&cache).await;
    assert_eq!(
        call(&cache, &origin, 10 * MS).await,
        Ok(1),
        "still stale: this call starts a retry"
    );
    loads_finished(&cache).await;
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(3));
}

#[tokio::test(start_paused = true)]
async fn a_miss_during_an_early_refresh_joins_it() {
    // β so large that every fresh hit asks for an early refresh.
    let policy = Policy::builder("t")
        .fresh(1_000 * MS)
        .xfetch(1e9)
        .build()
        .unwrap();
    let cache: Shared = paused(policy);
    let origin = Origin::default();
    assert_eq!(call(&cache, &origin, 10 * MS).await, Ok(1));
    sleep(500 * MS).await;
    // Fresh: served at once; starts a refresh that runs until t = 2.5 s.
    assert_eq!(call(&cache, &origin, 2_000 * MS).await, Ok(1));
    sleep(700 * MS).await; // expired at t = 1.0 s; the refresh still runs
    let started = tokio::time::Instant::now();
    assert_eq!(
        call(&cache, &origin, 2_000 * MS).await,
        Ok(2),
        "the refresh's value"
    );
    assert_eq!(
        started.elapsed(),
        1_300 * MS,
        "waited for the running refresh"
    );
    assert_eq!(origin.calls(), 2);
    let stats = cache.stats();
    assert_eq!((stats.early_refreshes, stats.coalesced), (1, 1));
}

/// End to end: keys filled with recompute time δ, each read once at time-to-expiry x,
/// refresh early at rate exp(-x/(βδ)), within five standard errors.
///
/// The rate depends on x and δ only, not on the fresh time, which is long here: memory
/// drops an entry by a time-to-live in real time (the longest it could be served), and
/// filling and reading 4,000 keys can take longer than a short fresh time in real time
/// on a loaded machine, while the paused clock says every key is still fresh.
#[tokio::test(start_paused = true)]
async fn early_refresh_rate_through_the_cache_matches_xfetch() {
    let (beta, delta, x, keys) = (1.0, 0.2, 0.2, 4_000u32);
    let fresh = 60.0;
    let policy = Policy::builder("t")
        .fresh(Duration::from_secs_f64(fresh))
        .xfetch(beta)
        .capacity(10_000)
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = paused(policy);
    let fills: Vec<_> = (0..keys)
        .map(|k| {
            let cache = cache.clone();
            tokio::spawn(async move {
                cache
                    .load(k, move || async move {
                        sleep(Duration::from_secs_f64(delta)).await;
                        Ok(k)
                    })
                    .await
            })
        })
        .collect();
    for fill in fills {
        bounded(fill).await.unwrap().unwrap();
    }
    sleep(Duration::from_secs_f64(fresh - x)).await;
    let mut early = 0;
    for k in 0..keys {
        let before = cache.stats().early_refreshes;
        cache.load(k, move || async move { Ok(k) }).await.unwrap();
        early += cache.stats().early_refreshes - before;
    }
    assert_eq!(
        cache.stats().misses,
        u64::from(keys),
        "every read found its key: only the fills missed"
    );
    let rate = early as f64 / keys as f64;
    let expected = (-x / (beta * delta)).exp();
    let tolerance = 5.0 * (expected * (1.0 - expected) / keys as f64).sqrt();
    assert!(
        (rate - expected).abs() <= tolerance,
        "rate {rate:.3}, expected {expected:.3} ± {tolerance:.3}"
    );
}

#[tokio::test(start_paused = true)]
async fn jitter_spreads_expiry_across_the_fraction() {
    let policy = Policy::builder("t")
        .fresh(10_000 * MS)
        .jitter(0.2)
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = paused(policy);
    for k in 0..1_000 {
        cache.load(k, move || async move { Ok(k) }).await.unwrap();
    }
    let fresh = |cache: &Cache<u32, u32>| (0..1_000).filter(|k| cache.peek(k).is_some()).count();
    sleep(7_999 * MS).await;
    assert_eq!(fresh(&cache), 1_000, "nothing expires before fresh × 0.8");
    sleep(2_001 * MS).await;
    let at_ten = fresh(&cache);
    assert!(
        (400..=600).contains(&at_ten),
        "about half outlive fresh: {at_ten}"
    );
    sleep(2_001 * MS).await;
    assert_eq!(fresh(&cache), 0, "everything expires by fresh × 1.2");
}
