//! A fresh hit through `stampede::Cache::load` against a raw `moka::sync::Cache::get` on the
//! same key and value types, in the same run.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use stampede::{Cache, Policy};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: u64 = 42;

fn fresh_hit(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let value: Arc<str> = Arc::from("a profile of moderate size");

    let policy = Policy::builder("bench")
        .fresh(Duration::from_secs(3_600))
        .build()
        .unwrap();
    let ours: Cache<u64, Arc<str>> = Cache::new(policy);
    let fill = value.clone();
    runtime
        .block_on(ours.load(KEY, move || async move { Ok(fill) }))
        .unwrap();

    let moka: moka::sync::Cache<u64, Arc<str>> = moka::sync::Cache::new(10_000);
    moka.insert(KEY, value.clone());

    // What a moka user who needs expiry writes; stampede's store is configured the same way.
    let moka_ttl: moka::sync::Cache<u64, Arc<str>> = moka::sync::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(Duration::from_secs(3_600))
        .build();
    moka_ttl.insert(KEY, value.clone());

    let mut group = c.benchmark_group("fresh_hit");
    group.bench_function(
        BenchmarkId::new("moka::sync::Cache::get", "Arc<str>"),
        |b| b.iter(|| black_box(moka.get(black_box(&KEY)))),
    );
    group.bench_function(
        BenchmarkId::new("moka::sync::Cache::get with time_to_live", "Arc<str>"),
        |b| b.iter(|| black_box(moka_ttl.get(black_box(&KEY)))),
    );
    // One runtime entry for the whole batch: a hit completes on its first poll, so this
    // times the hit itself, not `block_on`.
    group.bench_function(BenchmarkId::new("stampede::Cache::load", "Arc<str>"), |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let hit = ours
                        .load(black_box(KEY), || async { unreachable!("fresh hit") })
                        .await;
                    black_box(hit.ok());
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, fresh_hit);
criterion_main!(benches);
