//! `herd --fleet N --keys M`: what notices cost across many keys. Each of the N replicas
//! (tiered, so each keeps memory copies) loads its own share of M keys, then invalidates
//! and loads each again: every key is written three times (publish, invalidation,
//! publish), each write announced by one notice. A replica hears the notices of the keys
//! it loads or holds and of keys that share a notice bucket with them; with one channel
//! for everything, every replica heard every write, 1 − 1/N of them about keys it never
//! touched.
//!
//! Columns: writes (notices sent); deliveries (notices received, over all replicas);
//! per replica and write, the notices a replica received about keys it does not hold
//! (what it received beyond its own writes' notices), against 1 − 1/N for one channel;
//! the notice buckets a replica subscribes to; Redis CPU (`INFO cpu`, user + system)
//! per write.
use super::Store;
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Report {
    pub(super) writes: u64,
    pub(super) deliveries: u64,
    /// Per replica and write: notices about keys it does not hold.
    pub(super) foreign_per_write: f64,
    pub(super) buckets_per_replica: f64,
    pub(super) redis_cpu_per_write: Duration,
    pub(super) took: Duration,
}

fn backend(store: &Store) -> Backend {
    match store {
        Store::Node(redis) => Backend::tiered(redis.direct_url()),
        Store::Cluster(cluster) => Backend::tiered_cluster(cluster.node_urls()),
    }
}

impl Store {
    /// The CPU time Redis has used, over every master.
    fn cpu(&self) -> Duration {
        let infos: Vec<String> = match self {
            Store::Node(redis) => vec![redis.cli(&["INFO", "cpu"])],
            Store::Cluster(cluster) => (0..3).map(|i| cluster.cli(i, &["INFO", "cpu"])).collect(),
        };
        let seconds: f64 = (infos.iter())
            .flat_map(|info| info.lines())
            .filter_map(|line| {
                let (name, value) = line.trim().split_once(':')?;
                matches!(name, "used_cpu_sys" | "used_cpu_user")
                    .then(|| value.parse::<f64>().ok())?
            })
            .sum();
        Duration::from_secs_f64(seconds)
    }
}

pub(super) async fn measure(replicas: usize, keys: u64, store: &Store) -> Report {
    let policy = Policy::builder("herd-notices")
        .fresh(Duration::from_secs(600))
        .build()
        .expect("a valid policy");
    let fleet: Vec<(Runtime, Cache<u64, u64>)> = (0..replicas)
        .map(|_| {
            let runtime = Runtime::builder()
                .backend(backend(store))
                .build()
                .expect("a runtime");
            let cache = Cache::builder(policy.clone()).runtime(&runtime).build();
            (runtime, cache)
        })
        .collect();
    // Each replica's first load connects it; its loads hear notices once it subscribed.
    for (replica, (runtime, cache)) in fleet.iter().enumerate() {
        let _ = cache
            .load(u64::MAX - replica as u64, || async { Ok(0) })
            .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed)
        {
            assert!(
                Instant::now() < deadline,
                "replica {replica} never subscribed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let counts = |fleet: &[(Runtime, Cache<u64, u64>)]| -> Vec<(u64, u64)> {
        (fleet.iter())
            .map(|(runtime, _)| {
                let stats = runtime.backend_stats().expect("connected");
                (stats.notices_sent, stats.notices_received)
            })
            .collect()
    };
    let before = counts(&fleet);
    let cpu_before = store.cpu();
    let started = Instant::now();
    let caches: Vec<Arc<Cache<u64, u64>>> = fleet
        .iter()
        .map(|(_, cache)| Arc::new(cache.clone()))
        .collect();
    let mut tasks = Vec::new();
    for (replica, cache) in caches.into_iter().enumerate() {
        let share: Vec<u64> = (0..keys)
            .filter(|k| k % replicas as u64 == replica as u64)
            .collect();
        tasks.push(tokio::spawn(async move {
            for &key in &share {
                let _ = cache.load(key, move || async move { Ok(key) }).await;
            }
            for &key in &share {
                let _ = cache.invalidate(&key).await;
                let _ = cache.load(key, move || async move { Ok(key + 1) }).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a replica's writes");
    }
    let took = started.elapsed();
    // Until deliveries stop: every notice that was to arrive has.
    let mut last = counts(&fleet);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = counts(&fleet);
        if now == last {
            break;
        }
        last = now;
    }
    let cpu = store.cpu().saturating_sub(cpu_before);
    let deltas: Vec<(u64, u64)> = (before.iter().zip(&last))
        .map(|(b, a)| (a.0 - b.0, a.1 - b.1))
        .collect();
    let writes: u64 = deltas.iter().map(|d| d.0).sum();
    let deliveries: u64 = deltas.iter().map(|d| d.1).sum();
    let foreign: u64 = deltas
        .iter()
        .map(|(sent, got)| got.saturating_sub(*sent))
        .sum();
    let buckets: u64 = (fleet.iter())
        .map(|(runtime, _)| runtime.backend_stats().map_or(0, |s| s.notice_buckets))
        .sum();
    Report {
        writes,
        deliveries,
        foreign_per_write: foreign as f64 / (replicas as f64 * writes.max(1) as f64),
        buckets_per_replica: buckets as f64 / replicas as f64,
        redis_cpu_per_write: cpu / writes.max(1) as u32,
        took,
    }
}
