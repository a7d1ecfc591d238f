//! The fleet: several replicas (independent `Runtime`s, some on Tokio runtimes of their
//! own) against one real `redis-server` that each test starts for itself (skipped, loudly,
//! without one; `STAMPEDE_REQUIRE_REDIS=1` makes that a failure). One origin call per key
//! per expiry for the whole fleet, whatever happens to the replica that loads.
use crate::common;

use common::{bounded, eventually, AppError, DEADLINE};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use testkit::RedisServer;

type Versioned = (String, u64);

fn replica(redis: &RedisServer) -> Runtime {
    Runtime::builder()
        .backend(Backend::redis(redis.url()))
        .build()
        .unwrap()
}

fn policy(name: &str, fresh: Duration, lease: Duration) -> Policy {
    Policy::builder(name)
        .fresh(fresh)
        .lease(lease)
        .build()
        .unwrap()
}

fn cache(runtime: &Runtime, policy: Policy) -> Cache<u64, String, AppError> {
    Cache::builder(policy).runtime(runtime).build()
}

/// A cache whose values carry the source version they were read at.
fn versioned(runtime: &Runtime, name: &str) -> Cache<u64, Versioned, AppError> {
    let policy = policy(name, Duration::from_secs(60), Duration::from_secs(5));
    Cache::builder(policy)
        .runtime(runtime)
        .source_version(|(_, version): &Versioned| *version)
        .build()
}

/// An origin shared by every replica: counts its calls, takes `latency`, answers `value`.
#[derive(Clone, Default)]
struct Origin(Arc<AtomicUsize>);

impl Origin {
    fn calls(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    async fn load<V>(
        &self,
        cache: &Cache<u64, V, AppError>,
        key: u64,
        latency: Duration,
        value: V,
    ) -> Result<V, AppError>
    where
        V: Clone + Send + Sync + 'static,
    {
        let calls = self.0.clone();
        bounded(cache.load(key, move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(latency).await;
            Ok(value)
        }))
        .await
    }

    /// Key 1 loaded as `value` read at source `version`, at once.
    async fn versioned(
        &self,
        cache: &Cache<u64, Versioned, AppError>,
        value: &str,
        version: u64,
    ) -> Result<Versioned, AppError> {
        let value = (value.to_owned(), version);
        self.load(cache, 1, Duration::ZERO, value).await
    }
}

/// `callers` tasks on every cache, all loading `key` at once.
async fn herd(
    caches: &[Cache<u64, String, AppError>],
    callers: usize,
    origin: &Origin,
    key: u64,
    latency: Duration,
    value: &str,
) -> Vec<Result<String, AppError>> {
    let start = Arc::new(tokio::sync::Barrier::new(caches.len() * callers));
    let tasks: Vec<_> = caches
        .iter()
        .flat_map(|cache| std::iter::repeat_n(cache, callers))
        .map(|cache| {
            let (cache, origin, start, value) = (
                cache.clone(),
                origin.clone(),
                start.clone(),
                value.to_owned(),
            );
            tokio::spawn(async move {
                start.wait().await;
                origin.load(&cache, key, latency, value).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(bounded(task).await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_of_twenty_five_callers_make_one_origin_call_per_expiry() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..8).map(|_| replica(&redis)).collect();
    let fresh = Duration::from_millis(600);
    let policy = policy("fleet-herd", fresh, Duration::from_secs(5));
    let caches: Vec<_> = replicas.iter().map(|r| cache(r, policy.clone())).collect();
    let origin = Origin::default();
    let latency = Duration::from_millis(200);
    let answers = herd(&caches, 25, &origin, 1, latency, "first").await;
    assert_eq!(answers, vec![Ok("first".to_owned()); 200]);
    assert_eq!(origin.calls(), 1, "one origin call for the fleet");
    let waits: u64 = caches.iter().map(|c| c.stats().lease_waits).sum();
    assert!(waits >= 1, "the replicas that lost the race waited");

    // Past the expiry: the whole fleet misses again, and again one replica loads.
    tokio::time::sleep(fresh).await;
    let answers = herd(&caches, 25, &origin, 1, latency, "second").await;
    assert_eq!(answers, vec![Ok("second".to_owned()); 200]);
    assert_eq!(origin.calls(), 2, "one origin call per expiry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_steady_load_every_expiry_costs_one_origin_call() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // Replicas call a short-lived key without pause, so every expiry meets replicas whose
    // reads straddle the deadline: one whose read the server still answered with the old
    // value must not load beside the replica that takes the lease.
    let fresh = Duration::from_millis(100);
    let replicas: Vec<Runtime> = (0..4).map(|_| replica(&redis)).collect();
    let caches: Vec<_> = replicas
        .iter()
        .map(|runtime| cache(runtime, policy("steady", fresh, Duration::from_secs(5))))
        .collect();
    let origin = Origin::default();
    let started = Instant::now();
    let run = Duration::from_millis(1_500);
    let callers: Vec<_> = caches
        .iter()
        .flat_map(|cache| (0..3).map(move |_| cache.clone()))
        .map(|cache| {
            let origin = origin.clone();
            tokio::spawn(async move {
                while started.elapsed() < run {
                    origin
                        .load(&cache, 1, Duration::from_millis(10), "v".to_owned())
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for caller in callers {
        bounded(caller).await.unwrap();
    }
    // Each expiry is one load; there are at most elapsed / fresh + 1 of them.
    let expiries = started.elapsed().as_millis() / fresh.as_millis() + 1;
    assert!(
        origin.calls() as u128 <= expiries,
        "{} origin calls for at most {expiries} expiries",
        origin.calls()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_other_replicas_are_woken_by_the_publish_not_by_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..4).map(|_| replica(&redis)).collect();
    // A lease far longer than the test may take: only a notice can end the waits in time.
    let lease = Duration::from_secs(10);
    let policy = policy("fleet-wake", Duration::from_secs(60), lease);
    let caches: Vec<_> = replicas.iter().map(|r| cache(r, policy.clone())).collect();
    let origin = Origin::default();
    let started = Instant::now();
    let answers = herd(&caches, 10, &origin, 1, Duration::from_millis(300), "v").await;
    let took = started.elapsed();
    assert_eq!(answers, vec![Ok("v".to_owned()); 40]);
    assert_eq!(origin.calls(), 1);
    assert!(
        took < Duration::from_secs(2),
        "woken by the notice, not at the lease's end ({lease:?}): {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_gives_its_lease_back_and_a_waiting_replica_loads_at_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (replica(&redis), replica(&redis));
    let policy = policy(
        "fleet-release",
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let (failing, waiting) = (cache(&one, policy.clone()), cache(&other, policy));
    let (entered, fail) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let load = tokio::spawn({
        let (failing, entered, fail) = (failing.clone(), entered.clone(), fail.clone());
        async move {
            failing
                .load(1, move || async move {
                    entered.notify_one();
                    fail.notified().await;
                    Err(AppError::Down(1))
                })
                .await
        }
    });
    bounded(entered.notified()).await;
    let origin = Origin::default();
    let waiter = tokio::spawn({
        let (waiting, origin) = (waiting.clone(), origin.clone());
        async move {
            origin
                .load(&waiting, 1, Duration::ZERO, "second try".to_owned())
                .await
        }
    });
    eventually(|| waiting.stats().lease_waits == 1).await;
    let released = Instant::now();
    fail.notify_one();
    assert_eq!(bounded(load).await.unwrap(), Err(AppError::Down(1)));
    assert_eq!(bounded(waiter).await.unwrap(), Ok("second try".into()));
    assert_eq!(origin.calls(), 1);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the released lease was taken at once, not after its 10 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_dies_while_loading_loses_its_lease_and_one_survivor_loads() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let lease = Duration::from_millis(800);
    let policy = policy("fleet-crash", Duration::from_secs(60), lease);
    // The dying replica runs on a Tokio runtime of its own, so the test can stop it.
    let dying = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dying_replica = replica(&redis);
    let dying_cache = cache(&dying_replica, policy.clone());
    let origin = Origin::default();
    let (entered_tx, entered) = mpsc::channel();
    drop(dying.spawn({
        let calls = origin.0.clone();
        async move {
            dying_cache
                .load(1, move || async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let _ = entered_tx.send(());
                    std::future::pending::<Result<String, AppError>>().await
                })
                .await
        }
    }));
    bounded(tokio::task::spawn_blocking(move || {
        entered.recv_timeout(DEADLINE)
    }))
    .await
    .unwrap()
    .expect("the dying replica started its load");
    // The replica's process dies: no publish, no release; only the lease's TTL frees it.
    let died = Instant::now();
    dying.shutdown_background();

    let survivors: Vec<Runtime> = (0..3).map(|_| replica(&redis)).collect();
    let caches: Vec<_> = survivors.iter().map(|r| cache(r, policy.clone())).collect();
    let latency = Duration::from_millis(100);
    let answers = herd(&caches, 10, &origin, 1, latency, "survived").await;
    assert_eq!(answers, vec![Ok("survived".to_owned()); 30]);
    assert_eq!(
        origin.calls(),
        2,
        "the dead replica's call, then one survivor's"
    );
    let took = died.elapsed();
    assert!(
        took < lease + latency + Duration::from_secs(1),
        "within the lease plus the origin: {took:?}"
    );
}

#[test]
fn an_owner_frozen_past_its_lease_cannot_overwrite_the_newer_value() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let lease = Duration::from_millis(500);
    let policy = policy("fleet-frozen", Duration::from_secs(60), lease);
    let url = redis.url();
    let (entered_tx, entered) = mpsc::channel();
    let (thaw, frozen) = mpsc::channel::<()>();
    // The owner: one thread runs its whole runtime, so blocking it freezes the replica
    // (no timers, no connection, nothing renewing), like a long GC pause or a stopped VM.
    let owner = std::thread::spawn({
        let policy = policy.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let replica = Runtime::builder()
                    .backend(Backend::redis(url))
                    .build()
                    .unwrap();
                let cache = cache(&replica, policy);
                let answer = cache
                    .load(1, move || async move {
                        let _ = entered_tx.send(());
                        let _ = frozen.recv_timeout(DEADLINE);
                        Ok("old".to_owned())
                    })
                    .await;
                (answer, cache.stats())
            })
        }
    });
    entered
        .recv_timeout(DEADLINE)
        .expect("the owner started its load");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (other, reader) = (replica(&redis), replica(&redis));
        let (other, reader) = (cache(&other, policy.clone()), cache(&reader, policy));
        let origin = Origin::default();
        // Waits out the frozen owner's lease, takes it over and stores its value.
        let newer = origin
            .load(&other, 1, Duration::ZERO, "new".to_owned())
            .await;
        assert_eq!(newer, Ok("new".into()));
        let waited = other.stats();
        // Taken over from the silent owner, or granted once its lease lapsed: either way
        // won, after one wait.
        assert_eq!(
            (waited.lease_waits, waited.leases_lost, waited.leases_won),
            (1, 1, 1),
            "found it held, waited, then took it: {waited:?}"
        );
        // It waited for the owner's lease, not for long past it.
        assert!(
            waited.lease_wait_max > Duration::ZERO && waited.lease_wait_max < lease * 4,
            "{waited:?}"
        );
        assert_eq!(waited.lease_wait_total, waited.lease_wait_max);
        // The owner wakes and publishes under its old fence.
        thaw.send(()).unwrap();
        let (answer, stats) = bounded(tokio::task::spawn_blocking(move || owner.join()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            answer,
            Ok("old".into()),
            "its own caller still gets its value"
        );
        assert_eq!(stats.publish_refused, 1);
        assert_eq!(
            (
                stats.leases_won,
                stats.leases_expired,
                stats.refreshes_refused
            ),
            (1, 1, 0),
            "its lease lapsed before it published: {stats:?}"
        );
        let read = origin
            .load(&reader, 1, Duration::ZERO, "unexpected".to_owned())
            .await;
        assert_eq!(read, Ok("new".into()), "the newer value stays");
        assert_eq!(origin.calls(), 1);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_an_invalidation_elsewhere_overtook_is_counted_as_refused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (refreshing, invalidating) = (replica(&redis), replica(&redis));
    let policy = Policy::builder("fleet-refresh-refused")
        .fresh(Duration::from_millis(50))
        .stale(Duration::from_secs(60))
        .build()
        .unwrap();
    let (refreshing, invalidating) = (
        cache(&refreshing, policy.clone()),
        cache(&invalidating, policy),
    );
    let first = refreshing
        .load(1, || async { Ok("first".to_owned()) })
        .await;
    assert_eq!(first, Ok("first".into()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Stale: answered at once, refreshed in the background by an origin held open.
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let stale = refreshing.load(1, {
        let (entered, release) = (entered.clone(), release.clone());
        move || async move {
            entered.notify_one();
            release.notified().await;
            Ok("refreshed".to_owned())
        }
    });
    assert_eq!(bounded(stale).await, Ok("first".into()));
    bounded(entered.notified()).await;
    bounded(invalidating.invalidate(&1)).await.unwrap();
    release.notify_one();
    eventually(|| refreshing.stats().publish_refused == 1).await;
    let stats = refreshing.stats();
    assert_eq!(
        (
            stats.refreshes_refused,
            stats.leases_won,
            stats.leases_expired
        ),
        (1, 2, 1),
        "the refresh held the lease the invalidation overtook: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_on_one_replica_fences_a_load_on_another_and_wakes_its_waiters() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..3).map(|_| replica(&redis)).collect();
    let policy = policy(
        "fleet-fenced",
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let [loading, waiting, invalidating] = [0, 1, 2].map(|i| cache(&replicas[i], policy.clone()));
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let load = tokio::spawn({
        let (loading, entered, release) = (loading.clone(), entered.clone(), release.clone());
        async move {
            loading
                .load(1, move || async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, AppError>("before".to_owned())
                })
                .await
        }
    });
    bounded(entered.notified()).await;
    let origin = Origin::default();
    let waiter = tokio::spawn({
        let (waiting, origin) = (waiting.clone(), origin.clone());
        async move {
            origin
                .load(&waiting, 1, Duration::ZERO, "after".to_owned())
                .await
        }
    });
    eventually(|| waiting.stats().lease_waits == 1).await;
    bounded(invalidating.invalidate(&1)).await.unwrap();
    // The invalidation freed the lease and woke the waiter, which loads anew.
    assert_eq!(bounded(waiter).await.unwrap(), Ok("after".into()));
    release.notify_one();
    assert_eq!(
        bounded(load).await.unwrap(),
        Ok("before".into()),
        "its callers still get it"
    );
    assert_eq!(loading.stats().publish_refused, 1);
    let read = origin
        .load(&invalidating, 1, Duration::ZERO, "unexpected".to_owned())
        .await;
    assert_eq!(
        read,
        Ok("after".into()),
        "the fenced value was never stored"
    );
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_notice_still_ends_every_wait_within_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..4).map(|_| replica(&redis)).collect();
    let lease = Duration::from_secs(2);
    let policy = policy("fleet-unheard", Duration::from_secs(60), lease);
    let caches: Vec<_> = replicas.iter().map(|r| cache(r, policy.clone())).collect();
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let origin = Origin::default();
    let owner = tokio::spawn({
        let (cache, entered, release, calls) = (
            caches[0].clone(),
            entered.clone(),
            release.clone(),
            origin.0.clone(),
        );
        async move {
            cache
                .load(1, move || async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, AppError>("v".to_owned())
                })
                .await
        }
    });
    bounded(entered.notified()).await;
    let waiters: Vec<_> = caches[1..]
        .iter()
        .map(|cache| {
            let (cache, origin) = (cache.clone(), origin.clone());
            tokio::spawn(async move {
                let answer = origin.load(&cache, 1, Duration::ZERO, "x".to_owned()).await;
                (answer, Instant::now())
            })
        })
        .collect();
    eventually(|| caches[1..].iter().all(|c| c.stats().lease_waits == 1)).await;
    // Every subscription drops: the publish below may reach nobody.
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let published = Instant::now();
    release.notify_one();
    assert_eq!(bounded(owner).await.unwrap(), Ok("v".into()));
    for waiter in waiters {
        let (answer, at) = bounded(waiter).await.unwrap();
        assert_eq!(answer, Ok("v".into()));
        assert!(
            at.duration_since(published) < lease,
            "a wait outlived the lease"
        );
    }
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidations_out_of_order_never_bring_old_data_back() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (replica(&redis), replica(&redis));
    let (reader, writer) = (
        versioned(&one, "fleet-versions"),
        versioned(&other, "fleet-versions"),
    );
    let origin = Origin::default();
    assert_eq!(
        origin.versioned(&reader, "v42", 42).await,
        Ok(("v42".into(), 42))
    );
    // A delayed invalidation for a change the value already reflects changes nothing.
    bounded(writer.invalidate_at(&1, 41)).await.unwrap();
    bounded(writer.invalidate_at(&1, 42)).await.unwrap();
    assert_eq!(
        origin.versioned(&reader, "x", 0).await,
        Ok(("v42".into(), 42))
    );
    assert_eq!(origin.calls(), 1);
    // Version 44 arrives before 43: 44 invalidates, 43 is late.
    bounded(writer.invalidate_at(&1, 44)).await.unwrap();
    bounded(writer.invalidate_at(&1, 43)).await.unwrap();
    // A load from a lagging read replica, still at 43: answered, not stored.
    assert_eq!(
        origin.versioned(&reader, "v43", 43).await,
        Ok(("v43".into(), 43))
    );
    assert_eq!(reader.stats().publish_refused, 1);
    assert_eq!(origin.calls(), 2);
    // The next load reads the source as of 44 and stays.
    assert_eq!(
        origin.versioned(&writer, "v44", 44).await,
        Ok(("v44".into(), 44))
    );
    assert_eq!(
        origin.versioned(&reader, "x", 0).await,
        Ok(("v44".into(), 44))
    );
    assert_eq!(origin.calls(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_invalidations_out_of_order_keep_the_same_rules() {
    let runtime = Runtime::builder().build().unwrap();
    let cache = versioned(&runtime, "memory-versions");
    let origin = Origin::default();
    assert_eq!(
        origin.versioned(&cache, "v42", 42).await,
        Ok(("v42".into(), 42))
    );
    cache.invalidate_at(&1, 42).await.unwrap();
    assert_eq!(
        origin.versioned(&cache, "x", 0).await,
        Ok(("v42".into(), 42)),
        "late: kept"
    );
    cache.invalidate_at(&1, 44).await.unwrap();
    cache.invalidate_at(&1, 43).await.unwrap();
    assert_eq!(
        origin.versioned(&cache, "v43", 43).await,
        Ok(("v43".into(), 43))
    );
    assert_eq!(cache.peek(&1), None, "read before the newest invalidation");
    assert_eq!(
        origin.versioned(&cache, "v44", 44).await,
        Ok(("v44".into(), 44))
    );
    assert_eq!(cache.peek(&1), Some(("v44".into(), 44)));
    assert_eq!(origin.calls(), 3);
}

// `source_version` on the attribute, and `invalidate_at` on the handle (memory backend:
// this binary installs no runtime).
static PRICE_CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Price {
    cents: u64,
    version: u64,
}

#[stampede::cached(fresh = "60s", source_version = |price: &Price| price.version)]
async fn price(id: u64) -> Result<Price, AppError> {
    let call = PRICE_CALLS.fetch_add(1, Ordering::SeqCst) as u64;
    Ok(Price {
        cents: id * 100 + call,
        version: 10 + call,
    })
}

#[tokio::test]
async fn the_attribute_reads_source_versions_and_the_handle_invalidates_at_one() {
    assert_eq!(
        price(1).await,
        Ok(Price {
            cents: 100,
            version: 10
        })
    );
    PRICE.invalidate_at(&1, 9).await.unwrap();
    PRICE.invalidate_at(&1, 10).await.unwrap();
    assert_eq!(
        price(1).await,
        Ok(Price {
            cents: 100,
            version: 10
        }),
        "late: kept"
    );
    PRICE.invalidate_at(&1, 11).await.unwrap();
    assert_eq!(
        price(1).await,
        Ok(Price {
            cents: 101,
            version: 11
        })
    );
    assert_eq!(PRICE_CALLS.load(Ordering::SeqCst), 2);
}

// An `i64` version (a BIGINT column) on the attribute, and `invalidate_at` with `i64`s.
static ROW_CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Row {
    name: String,
    version: i64,
}

fn row_version(row: &Row) -> i64 {
    row.version
}

#[stampede::cached(fresh = "60s", source_version = row_version)]
async fn row(id: u64) -> Result<Row, AppError> {
    let call = ROW_CALLS.fetch_add(1, Ordering::SeqCst) as i64;
    Ok(Row {
        name: format!("{id}#{call}"),
        version: 10 + call,
    })
}

#[tokio::test]
async fn the_attribute_reads_i64_source_versions() {
    assert_eq!(row(1).await.map(|row| row.version), Ok(10));
    let read_at: i64 = 10;
    ROW.invalidate_at(&1, read_at - 1).await.unwrap();
    ROW.invalidate_at(&1, read_at).await.unwrap();
    assert_eq!(row(1).await.map(|row| row.version), Ok(10), "late: kept");
    ROW.invalidate_at(&1, read_at + 1).await.unwrap();
    assert_eq!(row(1).await.map(|row| row.version), Ok(11));
    assert_eq!(ROW_CALLS.load(Ordering::SeqCst), 2);
}

/// Four replicas of `backend` whose value of key 1 went stale: every caller is answered at
/// once with the stale value while exactly one replica refreshes it for the fleet.
async fn one_refresh_for_the_fleet(backend: fn(String) -> Backend, name: &str) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..4)
        .map(|_| {
            Runtime::builder()
                .backend(backend(redis.url()))
                .build()
                .unwrap()
        })
        .collect();
    // Long enough that "new", once stored, stays fresh while every replica reads it, even
    // on a busy machine: a second refresh would be a refresh of "new", not of "old".
    let fresh = Duration::from_secs(1);
    let policy = Policy::builder(name)
        .fresh(fresh)
        .stale(Duration::from_secs(30))
        .lease(Duration::from_secs(10))
        .build()
        .unwrap();
    let caches: Vec<_> = replicas.iter().map(|r| cache(r, policy.clone())).collect();
    let origin = Origin::default();
    let answers = herd(&caches, 5, &origin, 1, Duration::ZERO, "old").await;
    assert_eq!(answers, vec![Ok("old".to_owned()); 20]);
    assert_eq!(origin.calls(), 1);
    tokio::time::sleep(fresh).await;
    // A refresh slower than the whole herd: a caller that waited for it would get "new".
    let slow = Duration::from_millis(500);
    let answers = herd(&caches, 10, &origin, 1, slow, "new").await;
    assert_eq!(answers, vec![Ok("old".to_owned()); 40], "nobody waited");
    bounded(async {
        for cache in &caches {
            while origin.load(cache, 1, slow, "newer".to_owned()).await != Ok("new".into()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    })
    .await;
    assert_eq!(origin.calls(), 2, "one refresh for the fleet");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_value_in_redis_is_served_at_once_while_one_replica_refreshes_it() {
    one_refresh_for_the_fleet(Backend::redis, "fleet-stale-redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiered_replicas_refresh_a_stale_value_once_for_the_fleet() {
    one_refresh_for_the_fleet(Backend::tiered, "fleet-stale-tiered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidate_at_the_store_cannot_take_is_queued_with_its_version() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (replica(&redis), replica(&redis));
    let (first, second) = (
        versioned(&one, "fleet-queued"),
        versioned(&other, "fleet-queued"),
    );
    let origin = Origin::default();
    assert_eq!(
        origin.versioned(&first, "v42", 42).await,
        Ok(("v42".into(), 42))
    );
    redis.black_hole();
    let refused = bounded(first.invalidate_at(&1, 44)).await.unwrap_err();
    assert!(
        matches!(&refused, stampede::Error::Backend { message, .. } if message.contains("queued")),
        "{refused}"
    );
    assert_eq!(one.backend_stats().unwrap().invalidations_queued, 1);
    redis.heal();
    eventually(|| one.backend_stats().unwrap().invalidations_queued == 0).await;
    // Replayed with its version: the value is gone and the mark stands at 44.
    assert_eq!(
        origin.versioned(&second, "v43", 43).await,
        Ok(("v43".into(), 43))
    );
    assert_eq!(second.stats().publish_refused, 1, "older than the mark");
    assert_eq!(
        origin.versioned(&second, "v44", 44).await,
        Ok(("v44".into(), 44))
    );
    assert_eq!(
        origin.versioned(&second, "x", 0).await,
        Ok(("v44".into(), 44))
    );
    assert_eq!(origin.calls(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_an_invalidate_at_fences_a_running_load() {
    let runtime = Runtime::builder().build().unwrap();
    let cache = versioned(&runtime, "memory-fenced");
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let load = tokio::spawn({
        let (cache, entered, release) = (cache.clone(), entered.clone(), release.clone());
        async move {
            cache
                .load(1, move || async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok::<_, AppError>(("read before".to_owned(), 50))
                })
                .await
        }
    });
    bounded(entered.notified()).await;
    // The change lands while the load runs; the value it read still says 50.
    cache.invalidate_at(&1, 7).await.unwrap();
    release.notify_one();
    assert_eq!(bounded(load).await.unwrap(), Ok(("read before".into(), 50)));
    assert_eq!(cache.peek(&1), None, "fenced: not stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_coalescing_every_replica_calls_the_origin() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..3).map(|_| replica(&redis)).collect();
    let policy = Policy::builder("fleet-uncoalesced")
        .fresh(Duration::from_secs(60))
        .coalesce(false)
        .build()
        .unwrap();
    let caches: Vec<_> = replicas.iter().map(|r| cache(r, policy.clone())).collect();
    let origin = Origin::default();
    let answers = herd(&caches, 1, &origin, 1, Duration::from_millis(200), "v").await;
    assert_eq!(answers, vec![Ok("v".to_owned()); 3]);
    assert_eq!(origin.calls(), 3, "no lease: each miss loads");
    assert!(caches.iter().all(|c| c.stats().lease_waits == 0));
}
