//! A miss storm: 10,000 concurrent callers (tasks on 2 worker threads) on one cold key
//! whose origin takes 50 ms. Each contestant's storm is timed from the first spawn to the
//! last answer, and its origin calls are counted, printed, and written to
//! `target/criterion/miss_storm/notes.json` for `scripts/bench-table.py`.
//!
//! `cargo bench --bench miss_storm`
mod common;

use common::{profile, Notes, Profile, CAPACITY, TTL};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use std::future::Future;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

const CALLERS: usize = 10_000;
const WORKERS: usize = 2;
const ORIGIN_LATENCY: Duration = Duration::from_millis(50);

static NOTES: Notes = Notes::new("miss_storm");
static ORIGIN_CALLS: AtomicU64 = AtomicU64::new(0);
/// Every storm gets a key no contestant has seen, so each starts cold without relying on
/// anyone's invalidation.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// The slow origin: one database round trip.
async fn slow_origin(id: u64) -> Profile {
    ORIGIN_CALLS.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(ORIGIN_LATENCY).await;
    black_box(id);
    profile()
}

// stampede: its attribute (fresh for `TTL`, `CAPACITY` entries).
#[stampede::cached(fresh = "1h", capacity = 10_000, local)]
async fn stampede_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(slow_origin(id).await)
}

static MOKA_FUTURE: LazyLock<moka::future::Cache<u64, Profile>> = LazyLock::new(|| {
    moka::future::Cache::builder()
        .max_capacity(CAPACITY)
        .time_to_live(TTL)
        .build()
});

async fn moka_get_with(id: u64) -> Profile {
    MOKA_FUTURE.get_with(id, slow_origin(id)).await
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600, sync_writes = "by_key")]
async fn cached_by_key_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(slow_origin(id).await)
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600)]
async fn cached_profile(id: u64) -> Result<Profile, stampede::Error> {
    Ok(slow_origin(id).await)
}

/// No cache: every caller goes to the origin. The storm's floor for wall time (the
/// origin's latency plus scheduling 10,000 tasks) and its ceiling for origin calls.
async fn uncached(id: u64) -> Profile {
    slow_origin(id).await
}

/// Times `iters` storms through `call`, recording each storm's origin calls under `name`.
fn storms<'a, F, Fut>(
    runtime: &'a tokio::runtime::Runtime,
    name: &'static str,
    call: F,
) -> impl FnMut(u64) -> Duration + 'a
where
    F: Fn(u64) -> Fut + Copy + 'a,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    move |iters| {
        runtime.block_on(async {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
                ORIGIN_CALLS.store(0, Ordering::Relaxed);
                let start = Instant::now();
                let callers: Vec<_> = (0..CALLERS).map(|_| tokio::spawn(call(key))).collect();
                for caller in callers {
                    black_box(caller.await.expect("a caller task completes"));
                }
                total += start.elapsed();
                NOTES.record(
                    name,
                    &[("origin calls", ORIGIN_CALLS.load(Ordering::Relaxed))],
                );
            }
            total
        })
    }
}

fn miss_storm(c: &mut Criterion) {
    let runtime = common::multi_thread(WORKERS);
    let mut group = c.benchmark_group("miss_storm");
    // A storm takes the origin's 50 ms and more: few, equal batches.
    group.sample_size(10).sampling_mode(SamplingMode::Flat);

    macro_rules! contestant {
        ($name:literal, $call:expr) => {
            group.bench_function($name, |b| b.iter_custom(storms(&runtime, $name, $call)));
            NOTES.print($name);
        };
    }
    contestant!("stampede", stampede_profile);
    contestant!("moka::future get_with", moka_get_with);
    contestant!("cached by_key", cached_by_key_profile);
    contestant!("cached", cached_profile);
    contestant!("no cache", uncached);
    group.finish();
    NOTES.write();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = miss_storm
}
criterion_main!(benches);
