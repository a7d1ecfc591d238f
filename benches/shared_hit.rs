//! What a hit costs on the shared backends, each against its baseline in one run:
//! - the redis backend (every call reads Redis: one script call and a decode) against a
//!   raw `GET` of the same bytes on the same kind of connection (a `ConnectionManager`);
//! - a tiered hit (served from memory) against a hit of the memory backend;
//! - the redis backend on a local three-master Redis Cluster against the same on one node
//!   (the cluster client routes by slot; the key's master answers alone).
//!
//! Starts its own `redis-server` (and a cluster) on free loopback ports; without one it
//! says so and measures nothing.
//!
//! `cargo bench --bench shared_hit`
use criterion::{criterion_group, criterion_main, Criterion};
use redis::aio::ConnectionManager;
use stampede::{Backend, Cache, Policy, Runtime};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use testkit::{RedisCluster, RedisServer};

const KEY: u64 = 42;

fn value() -> String {
    "x".repeat(200)
}

fn cache(runtime: &Runtime, name: &str) -> Cache<u64, String> {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(3600))
        .build()
        .expect("a valid policy");
    Cache::builder(policy).runtime(runtime).build()
}

/// Calls that reached the origin where a hit was expected: a slow or lost answer from
/// Redis sends a call there (a degraded replica loads for itself, a tiered node that lost
/// its subscription drops its copies). Counted and reported, not a panic: the run goes on,
/// and says which of its figures include misses.
static MISSES: AtomicU64 = AtomicU64::new(0);

async fn missed() -> Result<String, stampede::Error> {
    MISSES.fetch_add(1, Ordering::Relaxed);
    Ok(value())
}

/// Reports the calls of contestant `name` that missed, if any, and starts counting anew.
fn report_misses(name: &str) {
    let misses = MISSES.swap(0, Ordering::Relaxed);
    if misses > 0 {
        eprintln!("shared_hit/{name}: {misses} calls reached the origin; its figure includes them");
    }
}

fn replica(backend: Backend) -> Runtime {
    Runtime::builder()
        .backend(backend)
        .build()
        .expect("a valid runtime")
}

/// Times `iters` sequential calls of `call` inside `runtime`.
fn timed<F, Fut>(runtime: &tokio::runtime::Runtime, iters: u64, call: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future,
{
    runtime.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(call().await);
        }
        start.elapsed()
    })
}

fn shared_hit(c: &mut Criterion) {
    let Some(redis) = RedisServer::start() else {
        eprintln!("shared_hit: no redis-server on PATH; nothing measured");
        return;
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    // The direct URL: no test proxy between the bench and the server.
    let url = redis.direct_url();
    let redis_cache = cache(&replica(Backend::redis(url.clone())), "bench-redis");
    let tiered_cache = cache(&replica(Backend::tiered(url.clone())), "bench-tiered");
    let memory_cache = cache(&replica(Backend::Memory), "bench-memory");
    for cache in [&redis_cache, &tiered_cache, &memory_cache] {
        let filled = tokio.block_on(cache.load(KEY, || async { Ok(value()) }));
        assert_eq!(filled.as_deref(), Ok(value().as_str()));
    }
    let value_key = redis
        .cli(&["--scan", "--pattern", "stampede:*bench-redis*"])
        .lines()
        .find(|key| key.ends_with('}'))
        .expect("the redis backend stored the value")
        .to_owned();
    let mut raw: ConnectionManager = tokio.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("a valid URL");
        ConnectionManager::new(client).await.expect("connected")
    });

    let mut group = c.benchmark_group("shared_hit");
    group.bench_function("raw redis GET, same bytes", |b| {
        b.iter_custom(|iters| {
            timed(&tokio, iters, || {
                let mut raw = raw.clone();
                let key = value_key.clone();
                async move {
                    let bytes: Option<Vec<u8>> = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut raw)
                        .await
                        .expect("GET answers");
                    bytes
                }
            })
        })
    });
    group.bench_function("stampede redis backend hit", |b| {
        b.iter_custom(|iters| timed(&tokio, iters, || redis_cache.load(KEY, missed)))
    });
    report_misses("stampede redis backend hit");
    group.bench_function("stampede memory hit", |b| {
        b.iter_custom(|iters| timed(&tokio, iters, || memory_cache.load(KEY, missed)))
    });
    report_misses("stampede memory hit");
    group.bench_function("stampede tiered hit", |b| {
        b.iter_custom(|iters| timed(&tokio, iters, || tiered_cache.load(KEY, missed)))
    });
    report_misses("stampede tiered hit");
    let cluster = RedisCluster::start().expect("redis-server runs, so a cluster starts");
    let cluster_cache = cache(
        &replica(Backend::redis_cluster(cluster.node_urls())),
        "bench-cluster",
    );
    let filled = tokio.block_on(cluster_cache.load(KEY, || async { Ok(value()) }));
    assert_eq!(filled.as_deref(), Ok(value().as_str()));
    group.bench_function("stampede redis backend hit, 3-master cluster", |b| {
        b.iter_custom(|iters| timed(&tokio, iters, || cluster_cache.load(KEY, missed)))
    });
    report_misses("stampede redis backend hit, 3-master cluster");
    group.finish();
    drop(cluster);
    // Touch the connection so it outlives the group (and the server outlives both).
    drop(tokio.block_on(async { redis::cmd("PING").query_async::<String>(&mut raw).await }));
    drop(redis);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = shared_hit
}
criterion_main!(benches);
