//! A fresh hit, one task: stampede against raw moka (sync and future) and the `cached`
//! crate (plain and `by_key`), same key and value, in one run.
//!
//! `stampede` is the function `#[cached]` makes; `stampede, bare load` is `Cache::load`
//! called directly with an origin that cannot return (what `hit.rs` measured before), so
//! the two together show what the function around the load costs.
//!
//! `cargo bench --bench fresh_hit`
mod common;

use common::contestants::{self, MOKA_FUTURE, MOKA_SYNC, MOKA_SYNC_TTL};
use common::{Profile, KEY};
use criterion::{criterion_group, criterion_main, Criterion};
use stampede::{Cache, CacheBuilder, Policy};
use std::future::Future;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Times `call` in one runtime entry per batch: a hit completes on its first poll, so
/// this times the hit itself, not `block_on`.
fn batched<F, Fut>(runtime: &tokio::runtime::Runtime, call: F) -> impl FnMut(u64) -> Duration + '_
where
    F: Fn(u64) -> Fut + 'static,
    Fut: Future,
{
    move |iters| {
        runtime.block_on(async {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(call(black_box(KEY)).await);
            }
            start.elapsed()
        })
    }
}

fn fresh_hit(c: &mut Criterion) {
    let runtime = common::current_thread();
    runtime.block_on(contestants::fill(KEY));
    let policy = Policy::builder("bench::bare")
        .fresh(common::TTL)
        .capacity(common::CAPACITY)
        .build()
        .expect("a valid policy");
    // Its value holds an `Arc<str>`, which serde cannot read back: memory only.
    let bare: Cache<u64, Profile> = CacheBuilder::new(policy, stampede::Error::from).build();
    runtime
        .block_on(bare.load(KEY, || async { Ok(common::profile()) }))
        .expect("the origin succeeds");

    let mut group = c.benchmark_group("fresh_hit");
    group.bench_function("moka::sync get", |b| {
        b.iter(|| black_box(MOKA_SYNC.get(black_box(&KEY))))
    });
    group.bench_function("moka::sync get, ttl", |b| {
        b.iter(|| black_box(MOKA_SYNC_TTL.get(black_box(&KEY))))
    });
    group.bench_function("moka::future get, ttl", |b| {
        b.iter_custom(batched(&runtime, |key| async move {
            MOKA_FUTURE.get(&key).await
        }))
    });
    group.bench_function("stampede", |b| {
        b.iter_custom(batched(&runtime, contestants::stampede_profile))
    });
    group.bench_function("stampede, bare load", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let hit = bare
                        .load(black_box(KEY), || async { unreachable!("a fresh hit") })
                        .await;
                    black_box(hit.ok());
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("cached", |b| {
        b.iter_custom(batched(&runtime, contestants::cached_profile))
    });
    group.bench_function("cached by_key", |b| {
        b.iter_custom(batched(&runtime, contestants::cached_by_key_profile))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    // Short enough that `cargo bench` runs every group in a few minutes on 2 cores;
    // command-line flags still override.
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = fresh_hit
}
criterion_main!(benches);
