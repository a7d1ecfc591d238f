//! The redis and tiered backends on a local three-master Redis Cluster that the test
//! starts for itself (skipped, loudly, without `redis-server`; `STAMPEDE_REQUIRE_REDIS=1`
//! makes that a failure). Each `Runtime` is one replica.
use crate::common;

use common::{bounded, patient_replica, AppError};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::RedisCluster;

const KEYS: u64 = 60;

/// Every test here counts origin calls, which hold only while the store answers in time.
fn replica(backend: Backend) -> Runtime {
    patient_replica(backend)
}

fn cache(runtime: &Runtime) -> Cache<u64, String, AppError> {
    let policy = Policy::builder("spread")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy).runtime(runtime).build()
}

async fn load(cache: &Cache<u64, String, AppError>, calls: &Arc<AtomicUsize>, key: u64) -> String {
    let calls = calls.clone();
    bounded(cache.load(key, move || async move {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(format!("value {key}"))
    }))
    .await
    .unwrap()
}

/// How many value keys of the cache `name` each master holds.
fn keys_per_master(cluster: &RedisCluster, name: &str) -> Vec<usize> {
    let pattern = format!("stampede:3:{{{name}:*}}");
    (0..3)
        .map(|i| {
            cluster
                .cli(i, &["--scan", "--pattern", &pattern])
                .lines()
                .count()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_values_spread_over_every_shard() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis_cluster(cluster.node_urls())),
        replica(Backend::tiered_cluster(cluster.node_urls())),
    );
    let (first, second) = (cache(&one), cache(&other));
    let calls = Arc::new(AtomicUsize::new(0));
    for key in 0..KEYS {
        assert_eq!(load(&first, &calls, key).await, format!("value {key}"));
    }
    for key in 0..KEYS {
        assert_eq!(load(&second, &calls, key).await, format!("value {key}"));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        KEYS as usize,
        "one origin call per key for the fleet"
    );
    let spread = keys_per_master(&cluster, "spread");
    assert!(
        spread.iter().all(|&n| n > 0),
        "keys on every master: {spread:?}"
    );
    assert_eq!(spread.iter().sum::<usize>(), KEYS as usize);

    // A cache-wide invalidation reaches every shard.
    bounded(second.invalidate_all()).await.unwrap();
    assert_eq!(keys_per_master(&cluster, "spread"), [0, 0, 0]);
    let calls = Arc::new(AtomicUsize::new(0));
    for key in 0..KEYS {
        load(&first, &calls, key).await;
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        KEYS as usize,
        "every key loads anew"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_costs_only_its_own_keys_until_it_returns() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let runtime = replica(Backend::redis_cluster(cluster.node_urls()));
    let cache = cache(&runtime);
    let calls = Arc::new(AtomicUsize::new(0));
    for key in 0..KEYS {
        load(&cache, &calls, key).await;
    }
    // How many keys the master about to die holds, read from the masters themselves.
    let spread = keys_per_master(&cluster, "spread");
    let on_dead = spread[0];
    assert!(on_dead > 0, "master 0 holds some keys: {spread:?}");

    cluster.kill(0);
    let before = calls.load(Ordering::SeqCst);
    for key in 0..KEYS {
        assert_eq!(load(&cache, &calls, key).await, format!("value {key}"));
    }
    let local_loads = calls.load(Ordering::SeqCst) - before;
    // The dead shard's keys are loaded here; the others are still served by their masters.
    // (Each dead key may cost one load per call while it is gone, but here one call each.)
    assert_eq!(local_loads, on_dead, "only the dead master's keys reloaded");

    cluster.restart(0);
    // Back (with no keys: the master kept none): what one replica loads now reaches
    // another through every master, the restarted one included, within a few seconds.
    let (other, third) = (
        replica(Backend::redis_cluster(cluster.node_urls())),
        replica(Backend::redis_cluster(cluster.node_urls())),
    );
    let (second, last) = (self::cache(&other), self::cache(&third));
    bounded(async {
        loop {
            let (loaded, shared) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            for key in 0..KEYS {
                load(&second, &loaded, key).await;
            }
            for key in 0..KEYS {
                load(&last, &shared, key).await;
            }
            if shared.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(
        keys_per_master(&cluster, "spread").iter().sum::<usize>(),
        KEYS as usize
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_make_one_origin_call_per_key_on_every_shard() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let policy = || {
        Policy::builder("fleet-spread")
            .fresh(Duration::from_secs(60))
            .lease(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let replicas: Vec<Runtime> = (0..8)
        .map(|_| replica(Backend::redis_cluster(cluster.node_urls())))
        .collect();
    let caches: Vec<Cache<u64, String, AppError>> = replicas
        .iter()
        .map(|runtime| Cache::builder(policy()).runtime(runtime).build())
        .collect();
    let calls: Arc<Vec<AtomicUsize>> = Arc::new((0..12).map(|_| AtomicUsize::new(0)).collect());
    let mut callers = Vec::new();
    for key in 0..12_u64 {
        for cache in &caches {
            for _ in 0..5 {
                let (cache, calls) = (cache.clone(), calls.clone());
                callers.push(tokio::spawn(async move {
                    cache
                        .load(key, move || async move {
                            calls[key as usize].fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok(format!("value {key}"))
                        })
                        .await
                }));
            }
        }
    }
    for (i, caller) in callers.into_iter().enumerate() {
        let key = i / 40;
        assert_eq!(bounded(caller).await.unwrap(), Ok(format!("value {key}")));
    }
    let per_key: Vec<usize> = calls.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(per_key, [1; 12], "one origin call per key for 8 replicas");
    let spread = keys_per_master(&cluster, "fleet-spread");
    assert!(
        spread.iter().all(|&n| n > 0),
        "keys on every master: {spread:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_with_a_master_down_still_clears_every_healthy_master() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis_cluster(cluster.node_urls())),
        replica(Backend::redis_cluster(cluster.node_urls())),
    );
    let (first, second) = (cache(&one), cache(&other));
    let calls = Arc::new(AtomicUsize::new(0));
    for key in 0..KEYS {
        load(&first, &calls, key).await;
    }
    let spread = keys_per_master(&cluster, "spread");
    assert!(spread.iter().all(|&n| n > 0), "{spread:?}");
    cluster.kill(0);
    let swept = bounded(first.invalidate_all()).await;
    assert!(swept.is_err(), "a master could not be swept: {swept:?}");
    assert_eq!(
        keys_per_master(&cluster, "spread")[1..],
        [0, 0],
        "the healthy masters' entries are gone"
    );
    // Every key reloads on another replica: the healthy shards were swept, the dead one
    // is read as down (loaded locally) until it is back, then swept before it is read.
    cluster.restart(0);
    let reloaded = Arc::new(AtomicUsize::new(0));
    for key in 0..KEYS {
        load(&second, &reloaded, key).await;
    }
    assert_eq!(reloaded.load(Ordering::SeqCst), KEYS as usize);
    // The sweep owed to the returned master is replayed.
    bounded(async {
        while one.backend_stats().unwrap().invalidations_queued > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}
