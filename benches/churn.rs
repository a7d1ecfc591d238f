//! Churn: 100,000 distinct keys cycled through caches of 10,000 entries, so nearly every
//! call is a miss that loads, inserts and makes room (the eviction path). One iteration
//! is one call with the next key; the origin answers at once. Each contestant's loads and
//! origin calls are written to `target/criterion/churn/notes.json`.
//!
//! `cargo bench --bench churn`
mod common;

use common::{profile, Notes, Profile, CAPACITY, TTL};
use criterion::{criterion_group, criterion_main, Criterion};
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

const KEYS: u64 = 100_000;

static NOTES: Notes = Notes::new("churn");
static ORIGIN_CALLS: AtomicU64 = AtomicU64::new(0);

async fn origin(id: u64) -> Profile {
    ORIGIN_CALLS.fetch_add(1, Ordering::Relaxed);
    black_box(id);
    profile()
}

// stampede: its attribute (fresh for `TTL`, `CAPACITY` entries).
#[stampede::cached(fresh = "1h", capacity = 10_000, local)]
async fn stampede_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(origin(id).await)
}

static MOKA_SYNC: LazyLock<moka::sync::Cache<u64, Profile>> = LazyLock::new(|| {
    moka::sync::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
});

async fn moka_sync_get_with(id: u64) -> Profile {
    MOKA_SYNC.get_with(id, || {
        ORIGIN_CALLS.fetch_add(1, Ordering::Relaxed);
        black_box(id);
        profile()
    })
}

static MOKA_FUTURE: LazyLock<moka::future::Cache<u64, Profile>> = LazyLock::new(|| {
    moka::future::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
});

async fn moka_future_get_with(id: u64) -> Profile {
    MOKA_FUTURE.get_with(id, origin(id)).await
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600)]
async fn cached_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(origin(id).await)
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600, sync_writes = "by_key")]
async fn cached_by_key_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(origin(id).await)
}

/// Times `iters` calls, each with the next key of the cycle, and records the loads and
/// origin calls under `name` (when there is one).
fn cycle<'a, F, Fut>(
    runtime: &'a tokio::runtime::Runtime,
    name: Option<&'static str>,
    next: &'a mut u64,
    call: F,
) -> impl FnMut(u64) -> Duration + 'a
where
    F: Fn(u64) -> Fut + 'a,
    Fut: Future,
{
    move |iters| {
        runtime.block_on(async {
            let calls_before = ORIGIN_CALLS.load(Ordering::Relaxed);
            let start = Instant::now();
            for _ in 0..iters {
                black_box(call(black_box(*next % KEYS)).await);
                *next += 1;
            }
            let elapsed = start.elapsed();
            let calls = ORIGIN_CALLS.load(Ordering::Relaxed) - calls_before;
            if let Some(name) = name {
                NOTES.record(name, &[("loads", iters), ("origin calls", calls)]);
            }
            elapsed
        })
    }
}

fn churn(c: &mut Criterion) {
    let runtime = common::current_thread();
    let mut group = c.benchmark_group("churn");

    macro_rules! contestant {
        ($name:literal, $call:expr) => {
            // One untimed pass first, so the timed calls find the cache full.
            let mut next = 0;
            cycle(&runtime, None, &mut next, $call)(KEYS);
            group.bench_function($name, |b| {
                b.iter_custom(cycle(&runtime, Some($name), &mut next, $call))
            });
            NOTES.print($name);
        };
    }
    contestant!("stampede", stampede_profile);
    contestant!("moka::sync get_with", moka_sync_get_with);
    contestant!("moka::future get_with", moka_future_get_with);
    contestant!("cached", cached_profile);
    contestant!("cached by_key", cached_by_key_profile);
    group.finish();
    NOTES.write();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = churn
}
criterion_main!(benches);
