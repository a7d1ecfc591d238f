//! Origin admission across keys (many keys flushed at once: the limit
//! holds, excess loads are shed or served stale), waiters holding no permit, shed leaders
//! settling their flights, and configurations naming a semaphore nobody defined.
use crate::common;

use common::{bounded, callers_at_once, AppError, Mode, Origin};
use stampede::{Cache, Clock, Error, Overrides, Policy, PolicyBuilder, Priority, Runtime};
use std::time::Duration;
use tokio::time::sleep;

const MS: Duration = Duration::from_millis(1);

type Shared = Cache<u32, usize, AppError>;

fn limited(limit: usize, queue_timeout: Duration) -> Runtime {
    Runtime::builder()
        .admission("db", limit, queue_timeout)
        .build()
        .unwrap()
}

/// A cache on Tokio's paused clock, bound to `runtime`.
fn paused_on(runtime: &Runtime, policy: PolicyBuilder) -> Shared {
    Cache::builder(policy.build().unwrap())
        .clock(Clock::tokio())
        .runtime(runtime)
        .build()
}

fn load(
    cache: &Shared,
    origin: &Origin,
    key: u32,
    latency: Duration,
) -> tokio::task::JoinHandle<Result<usize, AppError>> {
    let (cache, origin) = (cache.clone(), origin.clone());
    tokio::spawn(async move {
        cache
            .load(key, move || async move { Ok(origin.slow(latency).await) })
            .await
    })
}

fn is_overloaded(result: &Result<usize, AppError>) -> bool {
    matches!(
        result,
        Err(AppError::Cache(Error::Overloaded { cache, admission, .. }))
            if !cache.is_empty() && &**admission == "db"
    )
}

async fn a_hundred_cold_keys_under_a_limit_of_four(mode: Mode) {
    let runtime = limited(4, Duration::from_secs(60));
    let policy = Policy::builder(format!("flushed-{mode:?}"))
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let cache: Shared = Cache::builder(policy).runtime(&runtime).build();
    let origin = Origin::default();
    let callers = callers_at_once(100, mode, &cache, &origin, Duration::from_millis(20), |i| {
        i as u32
    });
    for caller in callers {
        assert!(bounded(caller).await.unwrap().is_ok(), "no load is shed");
    }
    assert_eq!(origin.calls(), 100, "one call per distinct key");
    assert_eq!(
        origin.max_running(),
        4,
        "the limit, reached and never passed"
    );
    let stats = cache.stats();
    assert_eq!((stats.admitted, stats.shed), (100, 0));
    assert!(
        stats.admission_wait_max >= Duration::from_millis(20),
        "the last keys queued behind earlier loads: {:?}",
        stats.admission_wait_max
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_cold_keys_with_a_limit_of_four_run_exactly_four_origin_calls_at_once() {
    a_hundred_cold_keys_under_a_limit_of_four(Mode::Detached).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inline_leaders_hold_the_same_limit() {
    a_hundred_cold_keys_under_a_limit_of_four(Mode::Inline).await;
}

#[tokio::test(start_paused = true)]
async fn past_a_short_queue_timeout_excess_loads_are_shed_or_served_stale() {
    let runtime = limited(4, 100 * MS);
    // Two functions behind one semaphore: one whose values may stand in for a failed
    // load for an hour, one with no stale value to give.
    let profiles = paused_on(
        &runtime,
        Policy::builder("profiles")
            .fresh(1_000 * MS)
            .stale_if_error(Duration::from_secs(3_600))
            .admission("db"),
    );
    let orders = paused_on(
        &runtime,
        Policy::builder("orders").fresh(1_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    for key in 0..50 {
        bounded(load(&profiles, &origin, key, 10 * MS))
            .await
            .unwrap()
            .unwrap();
    }
    sleep(2_000 * MS).await; // every profile expired, each within its fail-safe bound
    let filled = origin.calls();
    assert_eq!(filled, 50);

    let flush: Vec<_> = (0..50)
        .flat_map(|key| {
            [
                (true, load(&profiles, &origin, key, 1_000 * MS)),
                (false, load(&orders, &origin, key, 1_000 * MS)),
            ]
        })
        .collect();
    let (mut fresh, mut stale, mut overloaded) = (0, 0, 0);
    for (is_profile, caller) in flush {
        let result = bounded(caller).await.unwrap();
        match result {
            Ok(call) if call > filled => fresh += 1,
            Ok(_) if is_profile => stale += 1,
            ref shed if !is_profile && is_overloaded(shed) => overloaded += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(fresh, 4, "the limit's worth of loads ran");
    assert_eq!(origin.calls() - filled, 4);
    assert_eq!(origin.max_running(), 4);
    assert_eq!(fresh + stale + overloaded, 100);
    assert!(
        stale > 0 && overloaded > 0,
        "{stale} stale, {overloaded} overloaded"
    );
    let (p, o) = (profiles.stats(), orders.stats());
    assert_eq!(p.shed + o.shed, 96);
    assert_eq!(
        p.shed, stale as u64,
        "every shed profile load served its stale value"
    );
    assert_eq!(o.shed, overloaded as u64);
    assert_eq!(p.fallbacks, stale as u64);
    assert_eq!(p.admission_wait_max, 100 * MS, "shed at the queue timeout");
    // Profiles were loaded at 10..500 ms and served at 2,600 ms.
    assert!(
        (2_100 * MS..=2_590 * MS).contains(&p.oldest_stale_served),
        "{:?}",
        p.oldest_stale_served
    );
    // The shed profiles were re-armed like a failed load's fallback: no new queueing.
    let again = bounded(load(&profiles, &origin, 49, 1_000 * MS))
        .await
        .unwrap();
    assert!(matches!(again, Ok(call) if call <= filled));
    assert_eq!(origin.calls() - filled, 4);
}

#[tokio::test(start_paused = true)]
async fn waiters_of_a_shed_load_get_the_same_answer() {
    let runtime = limited(1, 100 * MS);
    let cache = paused_on(
        &runtime,
        Policy::builder("t").fresh(60_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    let holder = load(&cache, &origin, 0, 10_000 * MS); // takes the only permit
    tokio::task::yield_now().await;
    let callers: Vec<_> = (0..20).map(|_| load(&cache, &origin, 1, 10 * MS)).collect();
    let started = tokio::time::Instant::now();
    for caller in callers {
        let result = bounded(caller).await.unwrap();
        assert!(is_overloaded(&result), "{result:?}");
    }
    assert_eq!(started.elapsed(), 100 * MS, "the queue timeout, not a hang");
    let stats = cache.stats();
    assert_eq!((stats.shed, stats.coalesced), (1, 19), "one leader shed");
    assert_eq!(stats.in_flight, 1, "only the holder's load is left");
    assert_eq!(origin.calls(), 1);
    assert_eq!(bounded(holder).await.unwrap(), Ok(1));
    assert_eq!(
        bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap(),
        Ok(2),
        "nothing was cached for the shed key; the next call loads it"
    );
}

#[tokio::test(start_paused = true)]
async fn an_inline_leader_that_is_shed_settles_its_waiters() {
    let runtime = limited(1, 100 * MS);
    let cache = paused_on(
        &runtime,
        Policy::builder("t").fresh(60_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    let holder = load(&cache, &origin, 0, 10_000 * MS);
    tokio::task::yield_now().await;
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                cache
                    .load_inline(1, || async { Ok(origin.slow(10 * MS).await) })
                    .await
            })
        })
        .collect();
    for caller in callers {
        let result = bounded(caller).await.unwrap();
        assert!(is_overloaded(&result), "{result:?}");
    }
    assert_eq!(cache.stats().shed, 1);
    holder.abort();
}

#[tokio::test(start_paused = true)]
async fn waiters_of_a_key_hold_no_permit() {
    // One permit; a hundred callers of key 1 wait on one load. If waiters held permits,
    // key 2 would queue behind them and be shed.
    let runtime = limited(1, 1_000 * MS);
    let cache = paused_on(
        &runtime,
        Policy::builder("t").fresh(60_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    let hot: Vec<_> = (0..100)
        .map(|_| load(&cache, &origin, 1, 100 * MS))
        .collect();
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    let other = bounded(load(&cache, &origin, 2, 100 * MS)).await.unwrap();
    assert_eq!(other, Ok(2));
    assert_eq!(
        started.elapsed(),
        200 * MS,
        "queued behind one load, not a hundred callers"
    );
    for caller in hot {
        assert_eq!(bounded(caller).await.unwrap(), Ok(1));
    }
    let stats = cache.stats();
    assert_eq!((stats.admitted, stats.shed, stats.coalesced), (2, 0, 99));
}

#[tokio::test(start_paused = true)]
async fn a_shed_background_refresh_leaves_the_stale_value_served() {
    let runtime = limited(1, 100 * MS);
    let cache = paused_on(
        &runtime,
        Policy::builder("t")
            .fresh(1_000 * MS)
            .stale(60_000 * MS)
            .admission("db"),
    );
    let origin = Origin::default();
    assert_eq!(
        bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap(),
        Ok(1)
    );
    sleep(2_000 * MS).await; // stale now
    let holder = load(&cache, &origin, 0, 1_000 * MS);
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    assert_eq!(
        bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap(),
        Ok(1),
        "the stale value, at once"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    sleep(150 * MS).await; // the refresh queued 100 ms and was shed
    let stats = cache.stats();
    assert_eq!((stats.shed, stats.in_flight), (1, 1));
    assert_eq!(cache.peek(&1), Some(1), "still served");
    assert!(stats.oldest_stale_served >= 1_990 * MS);
    assert_eq!(bounded(holder).await.unwrap(), Ok(2));
    assert_eq!(
        bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap(),
        Ok(1)
    );
    sleep(20 * MS).await; // this stale hit's refresh got the free permit
    assert_eq!(cache.peek(&1), Some(3));
}

#[tokio::test(start_paused = true)]
async fn an_admission_the_runtime_does_not_define_fails_each_call_with_its_name() {
    let runtime = Runtime::builder().build().unwrap();
    let cache = paused_on(
        &runtime,
        Policy::builder("user-profile")
            .fresh(60_000 * MS)
            .admission("dbb"),
    );
    let origin = Origin::default();
    for _ in 0..3 {
        let result = bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap();
        let Err(AppError::Cache(error)) = result else {
            panic!("expected a configuration error, got {result:?}")
        };
        assert_eq!(
            error,
            Error::UnknownAdmission {
                cache: "user-profile".into(),
                admission: "dbb".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "cache `user-profile`: admission `dbb` is not defined by the runtime configuration (add an `[admission.dbb]` table with a `limit`)"
        );
    }
    assert_eq!(origin.calls(), 0, "no origin call runs unguarded");
}

#[tokio::test(start_paused = true)]
async fn a_disabled_function_calls_its_origin_every_time() {
    let runtime = Runtime::builder()
        .function("t", Overrides::new().enabled(false))
        .build()
        .unwrap();
    let cache = paused_on(&runtime, Policy::builder("t").fresh(60_000 * MS));
    let origin = Origin::default();
    for expected in 1..=5 {
        assert_eq!(
            bounded(load(&cache, &origin, 1, 10 * MS)).await.unwrap(),
            Ok(expected)
        );
    }
    let inline = cache
        .load_inline(1, || async { Ok(origin.slow(10 * MS).await) })
        .await;
    assert_eq!(inline, Ok(6));
    let stats = cache.stats();
    assert_eq!(
        (stats.origin_calls, stats.fresh_hits, stats.misses),
        (6, 0, 0)
    );
    assert_eq!(cache.peek(&1), None, "nothing is stored");
}

/// One admission shared by a background cache (low priority) and a user-facing one
/// (high): 40 cold report keys arrive first and fill the queue, then 20 profile keys.
/// Low-priority loads past the queue's `low_queue` are shed at once, every high-priority
/// load is admitted (the reserved permit keeps room for them), and the origin never
/// runs more than the limit across both caches.
#[tokio::test(start_paused = true)]
async fn low_priority_loads_are_shed_before_any_high_priority_load() {
    let runtime = Runtime::builder()
        .admission("db", 4, Duration::from_secs(10))
        .admission_shares("db", 1, Some(6))
        .build()
        .unwrap();
    let reports = paused_on(
        &runtime,
        Policy::builder("reports")
            .fresh(60_000 * MS)
            .admission("db")
            .priority(Priority::Low),
    );
    let profiles = paused_on(
        &runtime,
        Policy::builder("profiles")
            .fresh(60_000 * MS)
            .admission("db")
            .priority(Priority::High),
    );
    let origin = Origin::default();
    let low: Vec<_> = (0..40)
        .map(|key| load(&reports, &origin, key, 50 * MS))
        .collect();
    sleep(MS).await;
    // Every shared permit is taken and the queue is full: the first profile load is
    // admitted at once, by the reserved permit.
    let first = load(&profiles, &origin, 100, 50 * MS);
    sleep(MS).await;
    assert_eq!(profiles.stats().admitted, 1);
    assert_eq!(profiles.stats().admission_wait_max, Duration::ZERO);
    let mut high: Vec<_> = (0..19)
        .map(|key| load(&profiles, &origin, key, 50 * MS))
        .collect();
    high.push(first);
    let mut low_shed = 0;
    for result in futures_util::future::join_all(low).await {
        let result = result.unwrap();
        if is_overloaded(&result) {
            low_shed += 1;
        } else {
            assert!(result.is_ok(), "admitted or shed: {result:?}");
        }
    }
    for result in futures_util::future::join_all(high).await {
        assert!(result.unwrap().is_ok(), "no high-priority load is shed");
    }
    // Three shared permits run reports at once, six more queue; the other 31 are shed at
    // once, without waiting.
    assert_eq!(low_shed, 31);
    let (reports, profiles) = (reports.stats(), profiles.stats());
    assert_eq!((reports.shed, reports.shed_early), (31, 31));
    assert_eq!((reports.admitted, profiles.admitted), (9, 20));
    assert_eq!((profiles.shed, profiles.shed_early), (0, 0));
    assert_eq!(origin.calls(), 29, "one call per admitted load");
    assert_eq!(
        origin.max_running(),
        4,
        "the limit holds across both caches"
    );
}

/// The same admission with every load at normal priority: nothing is shed early, every
/// load queues until it is admitted, and none takes the reserved permit.
#[tokio::test(start_paused = true)]
async fn normal_loads_are_never_shed_early_nor_take_the_reserved_permit() {
    let runtime = Runtime::builder()
        .admission("db", 4, Duration::from_secs(10))
        .admission_shares("db", 1, Some(6))
        .build()
        .unwrap();
    let cache = paused_on(
        &runtime,
        Policy::builder("normal").fresh(60_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    let loads: Vec<_> = (0..60)
        .map(|key| load(&cache, &origin, key, 50 * MS))
        .collect();
    for result in futures_util::future::join_all(loads).await {
        assert!(
            result.unwrap().is_ok(),
            "every normal load queues and is admitted"
        );
    }
    let stats = cache.stats();
    assert_eq!((stats.admitted, stats.shed, stats.shed_early), (60, 0, 0));
    assert_eq!(
        origin.max_running(),
        3,
        "normal loads never take the reserved permit"
    );
}

/// One tenant flushes 2,000 keys while another reads 20 cold keys, on one admission of
/// 40 permits. With `per_group = 20` and the tenant as the key group, the flush holds at
/// most 20 permits and the second tenant's reads start at once: their slowest is the
/// origin's latency, as without the flush. Without a share they wait behind the flush.
async fn a_tenants_flush_beside_another_tenants_reads(per_group: Option<usize>) -> Duration {
    let mut runtime = Runtime::builder().admission("db", 40, Duration::from_secs(60));
    if let Some(per_group) = per_group {
        runtime = runtime.admission_per_group("db", per_group);
    }
    let runtime = runtime.build().unwrap();
    let policy = Policy::builder("tenant-rows")
        .fresh(60_000 * MS)
        .admission("db")
        .build()
        .unwrap();
    let rows: Cache<(u32, u32), usize, AppError> = Cache::builder(policy)
        .clock(Clock::tokio())
        .runtime(&runtime)
        .admission_group(|&(tenant, _): &(u32, u32)| tenant)
        .build();
    let (flush, reads) = (Origin::default(), Origin::default());
    let load = |tenant: u32, id: u32, origin: &Origin| {
        let (rows, origin) = (rows.clone(), origin.clone());
        tokio::spawn(async move {
            let asked = tokio::time::Instant::now();
            let got = rows
                .load((tenant, id), move || async move {
                    Ok(origin.slow(50 * MS).await)
                })
                .await;
            (got, asked.elapsed())
        })
    };
    let flushed: Vec<_> = (0..2_000).map(|id| load(1, id, &flush)).collect();
    sleep(MS).await;
    let read: Vec<_> = (0..20).map(|id| load(2, id, &reads)).collect();
    let mut slowest = Duration::ZERO;
    for read in futures_util::future::join_all(read).await {
        let (got, took) = read.unwrap();
        assert!(got.is_ok(), "{got:?}");
        slowest = slowest.max(took);
    }
    for flushed in futures_util::future::join_all(flushed).await {
        assert!(flushed.unwrap().0.is_ok(), "nothing is shed");
    }
    assert_eq!((flush.calls(), reads.calls()), (2_000, 20));
    assert!(flush.max_running() <= 40 && reads.max_running() <= 20);
    if let Some(per_group) = per_group {
        assert_eq!(flush.max_running(), per_group, "the flush holds its share");
    }
    slowest
}

#[tokio::test(start_paused = true)]
async fn a_tenants_flush_leaves_another_tenant_its_share_of_the_admission() {
    let shared = a_tenants_flush_beside_another_tenants_reads(Some(20)).await;
    assert_eq!(
        shared,
        50 * MS,
        "the reads start at once: the origin's latency"
    );
    let unshared = a_tenants_flush_beside_another_tenants_reads(None).await;
    assert!(
        unshared >= 20 * shared,
        "without a share the reads queue behind the flush: {unshared:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn one_call_can_carry_a_priority_of_its_own() {
    let runtime = Runtime::builder()
        .admission("db", 2, Duration::from_secs(10))
        .admission_shares("db", 1, Some(1))
        .build()
        .unwrap();
    // A normal-priority cache: its calls queue, and only High ones take the reserved permit.
    let rows = paused_on(
        &runtime,
        Policy::builder("rows").fresh(60_000 * MS).admission("db"),
    );
    let origin = Origin::default();
    // The shared permit is taken and one load queues behind it.
    let running = load(&rows, &origin, 1, 50 * MS);
    let queued = load(&rows, &origin, 2, 50 * MS);
    sleep(MS).await;
    // Wrapped as High: the reserved permit, at once.
    let urgent = {
        let (rows, origin) = (rows.clone(), origin.clone());
        tokio::spawn(stampede::priority(Priority::High, async move {
            rows.load(3, move || async move { Ok(origin.slow(50 * MS).await) })
                .await
        }))
    };
    sleep(MS).await;
    assert_eq!(
        origin.max_running(),
        2,
        "the high call runs beside the first"
    );
    // Wrapped as Low with a load queued already: shed at once, without queueing.
    let (rows_low, origin_low) = (rows.clone(), origin.clone());
    let shed = stampede::priority(Priority::Low, async move {
        rows_low
            .load(4, move || async move { Ok(origin_low.slow(50 * MS).await) })
            .await
    })
    .await;
    assert!(is_overloaded(&shed), "{shed:?}");
    assert_eq!(rows.stats().shed_early, 1);
    // Unwrapped, the same cache's calls are normal again: this one queues, and is admitted.
    for result in [running, queued, urgent] {
        assert!(result.await.unwrap().is_ok());
    }
    let again = load(&rows, &origin, 4, 50 * MS);
    assert!(again.await.unwrap().is_ok());
    assert_eq!(rows.stats().shed_early, 1);
}
