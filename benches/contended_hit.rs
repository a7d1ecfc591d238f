//! Contended fresh hits: 8 tasks on 2 worker threads all reading one hot key, through
//! the same contestants as `fresh_hit`. One iteration is one hit per task (8 hits), so
//! criterion's throughput line reads as hits per second.
//!
//! `cargo bench --bench contended_hit`
mod common;

use common::contestants::{self, MOKA_FUTURE, MOKA_SYNC, MOKA_SYNC_TTL};
use common::KEY;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::future::Future;
use std::hint::black_box;
use std::time::{Duration, Instant};

const TASKS: u64 = 8;
const WORKERS: usize = 2;

/// Runs `TASKS` tasks of `iters` calls each and returns the wall time until the last
/// finishes. The measuring future is outside the workers, which run only the callers.
fn contended<F, Fut>(runtime: &tokio::runtime::Runtime, call: F) -> impl FnMut(u64) -> Duration + '_
where
    F: Fn(u64) -> Fut + Copy + Send + 'static,
    Fut: Future + Send,
    Fut::Output: Send,
{
    move |iters| {
        runtime.block_on(async {
            let start = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    tokio::spawn(async move {
                        for _ in 0..iters {
                            black_box(call(black_box(KEY)).await);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("a caller task completes");
            }
            start.elapsed()
        })
    }
}

fn contended_hit(c: &mut Criterion) {
    let runtime = common::multi_thread(WORKERS);
    runtime.block_on(contestants::fill(KEY));

    let mut group = c.benchmark_group("contended_hit");
    group.throughput(Throughput::Elements(TASKS));
    group.bench_function("moka::sync get", |b| {
        b.iter_custom(contended(
            &runtime,
            |key| async move { MOKA_SYNC.get(&key) },
        ))
    });
    group.bench_function("moka::sync get, ttl", |b| {
        b.iter_custom(contended(
            &runtime,
            |key| async move { MOKA_SYNC_TTL.get(&key) },
        ))
    });
    group.bench_function("moka::future get, ttl", |b| {
        b.iter_custom(contended(&runtime, |key| async move {
            MOKA_FUTURE.get(&key).await
        }))
    });
    group.bench_function("stampede", |b| {
        b.iter_custom(contended(&runtime, contestants::stampede_profile))
    });
    group.bench_function("cached", |b| {
        b.iter_custom(contended(&runtime, contestants::cached_profile))
    });
    group.bench_function("cached by_key", |b| {
        b.iter_custom(contended(&runtime, contestants::cached_by_key_profile))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = contended_hit
}
criterion_main!(benches);
