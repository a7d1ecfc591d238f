//! Memory, measured: heap bytes per cached entry beyond its key and value, and heap bytes
//! per caller waiting in a miss storm, for stampede beside moka and the `cached` crate.
//!
//! A counting global allocator tracks the live heap; each figure is the growth of the
//! live heap divided by the number of entries or callers. Run it with
//!
//! ```text
//! cargo run --release -p stampede-benches --bin memory
//! ```
//!
//! and it prints two Markdown tables.
use stampede::{Cache, Policy};
use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The system allocator, counting the bytes it has handed out and not yet taken back.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter is bookkeeping beside it. This is the example's only `unsafe`: a
// global allocator cannot be installed without it, and the crates themselves forbid it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe {
            let ptr = System.alloc(layout);
            if !ptr.is_null() {
                LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            }
            ptr
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe {
            let ptr = System.alloc_zeroed(layout);
            if !ptr.is_null() {
                LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            }
            ptr
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe {
            System.dealloc(ptr, layout);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe {
            let new = System.realloc(ptr, layout, new_size);
            if !new.is_null() {
                LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
                LIVE.fetch_add(new_size, Ordering::Relaxed);
            }
            new
        }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Entries per cache, which is also each cache's capacity (so every entry stays).
const ENTRIES: u64 = 100_000;
/// Callers in the storm.
const CALLERS: usize = 10_000;
const TTL: Duration = Duration::from_secs(3_600);

// ---- Entries: u64 keys, u64 values, filled to capacity. ----

fn stampede_cache(name: &'static str, capacity: u64) -> Cache<u64, u64> {
    let policy = Policy::builder(name)
        .fresh(TTL)
        .capacity(capacity)
        .build()
        .expect("a valid policy");
    Cache::new(policy)
}

// `max_size` is `ENTRIES`: the attribute takes a literal.
#[cached::proc_macro::cached(max_size = 100_000, ttl_secs = 3_600)]
async fn cached_entry(id: u64) -> u64 {
    id
}

#[cached::proc_macro::cached(max_size = 100_000, ttl_secs = 3_600, sync_writes = "by_key")]
async fn cached_by_key_entry(id: u64) -> u64 {
    id
}

/// Live heap growth per entry after `fill` puts `ENTRIES` entries in a cache it builds.
/// The cache stays alive until the measurement is taken.
async fn per_entry<C, Fut>(fill: impl FnOnce() -> Fut) -> f64
where
    Fut: Future<Output = C>,
{
    let before = live();
    let cache = fill().await;
    let grown = live().saturating_sub(before);
    drop(cache);
    grown as f64 / ENTRIES as f64
}

async fn entries() -> Vec<(&'static str, f64)> {
    // Started outside the measurement: stampede's process-wide clock thread.
    drop(stampede_cache("memory::warm", 1));
    vec![
        (
            "stampede (`Cache::load`)",
            per_entry(|| async {
                let cache = stampede_cache("memory::entries", ENTRIES);
                for id in 0..ENTRIES {
                    let value = cache.load(id, move || async move { Ok(id) }).await;
                    assert_eq!(value.ok(), Some(id));
                }
                assert_eq!(cache.stats().origin_calls, ENTRIES);
                cache
            })
            .await,
        ),
        (
            "moka::sync::Cache, time_to_live",
            per_entry(|| async {
                let cache = moka::sync::Cache::builder()
                    .max_capacity(ENTRIES)
                    .time_to_live(TTL)
                    .build();
                for id in 0..ENTRIES {
                    cache.insert(id, id);
                }
                cache
            })
            .await,
        ),
        (
            "moka::future::Cache, time_to_live",
            per_entry(|| async {
                let cache = moka::future::Cache::builder()
                    .max_capacity(ENTRIES)
                    .time_to_live(TTL)
                    .build();
                for id in 0..ENTRIES {
                    cache.insert(id, id).await;
                }
                cache
            })
            .await,
        ),
        (
            "cached `#[cached(max_size, ttl_secs)]`",
            per_entry(|| async {
                for id in 0..ENTRIES {
                    assert_eq!(cached_entry(id).await, id);
                }
            })
            .await,
        ),
        (
            "cached, `sync_writes = \"by_key\"`",
            per_entry(|| async {
                for id in 0..ENTRIES {
                    assert_eq!(cached_by_key_entry(id).await, id);
                }
            })
            .await,
        ),
    ]
}

// ---- Waiting callers: `CALLERS` tasks on one cold key whose origin waits on a gate. ----

/// Closed until every caller is waiting; then opened for all.
static GATE: Semaphore = Semaphore::const_new(0);
static ORIGIN_CALLS: AtomicUsize = AtomicUsize::new(0);
static ARRIVED: AtomicUsize = AtomicUsize::new(0);
/// Each storm's cold key.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

async fn gated_origin(id: u64) -> u64 {
    ORIGIN_CALLS.fetch_add(1, Ordering::SeqCst);
    drop(GATE.acquire().await.expect("the gate is never closed"));
    id
}

static STAMPEDE: LazyLock<Cache<u64, u64>> =
    LazyLock::new(|| stampede_cache("memory::storm", 10_000));

async fn stampede_caller(id: u64) -> u64 {
    STAMPEDE
        .load(id, move || async move { Ok(gated_origin(id).await) })
        .await
        .expect("the origin succeeds")
}

static MOKA_FUTURE: LazyLock<moka::future::Cache<u64, u64>> = LazyLock::new(|| {
    moka::future::Cache::builder()
        .max_capacity(10_000)
        .time_to_live(TTL)
        .build()
});

async fn moka_caller(id: u64) -> u64 {
    MOKA_FUTURE.get_with(id, gated_origin(id)).await
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600, sync_writes = "by_key")]
async fn cached_by_key_caller(id: u64) -> u64 {
    gated_origin(id).await
}

#[cached::proc_macro::cached(max_size = 10_000, ttl_secs = 3_600)]
async fn cached_caller(id: u64) -> u64 {
    gated_origin(id).await
}

struct Waiting {
    per_caller: f64,
    future_size: usize,
    origin_calls: usize,
}

/// Spawns `CALLERS` tasks calling `call` on a cold key, waits until every one of them and
/// the origin are parked, and measures the live heap then.
async fn per_waiting_caller<F, Fut>(call: F) -> Waiting
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = u64> + Send + 'static,
{
    let key = NEXT_KEY.fetch_add(1, Ordering::SeqCst);
    let future_size = std::mem::size_of_val(&call(key));
    // The first call above made a future but never polled it, so the key is still cold.
    ARRIVED.store(0, Ordering::SeqCst);
    ORIGIN_CALLS.store(0, Ordering::SeqCst);
    let mut callers = Vec::with_capacity(CALLERS);
    let before = live();
    for _ in 0..CALLERS {
        let caller = call(key);
        callers.push(tokio::spawn(async move {
            ARRIVED.fetch_add(1, Ordering::SeqCst);
            caller.await
        }));
    }
    // A current-thread runtime runs one task at a time and each polls its call until it
    // parks, so once all have arrived and the origin has started, everyone is waiting.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ARRIVED.load(Ordering::SeqCst) < CALLERS || ORIGIN_CALLS.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the callers never parked"
        );
        tokio::task::yield_now().await;
    }
    let waiting = live().saturating_sub(before);
    GATE.add_permits(CALLERS);
    for caller in callers {
        assert_eq!(caller.await.expect("a caller completes"), key);
    }
    GATE.forget_permits(usize::MAX);
    Waiting {
        per_caller: waiting as f64 / CALLERS as f64,
        future_size,
        origin_calls: ORIGIN_CALLS.load(Ordering::SeqCst),
    }
}

async fn waiting() -> Vec<(&'static str, Waiting)> {
    // Each contestant's static cache is built before its storm, outside the measurement.
    LazyLock::force(&STAMPEDE);
    LazyLock::force(&MOKA_FUTURE);
    LazyLock::force(&CACHED_BY_KEY_CALLER);
    LazyLock::force(&CACHED_CALLER);
    vec![
        (
            "no cache (a task awaiting the origin)",
            per_waiting_caller(gated_origin).await,
        ),
        (
            "stampede (`Cache::load`)",
            per_waiting_caller(stampede_caller).await,
        ),
        (
            "moka::future `get_with`",
            per_waiting_caller(moka_caller).await,
        ),
        (
            "cached, `sync_writes = \"by_key\"`",
            per_waiting_caller(cached_by_key_caller).await,
        ),
        (
            "cached `#[cached]`",
            per_waiting_caller(cached_caller).await,
        ),
    ]
}

/// `10000` as `10,000`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");

    let entries = runtime.block_on(entries());
    println!(
        "Heap per entry, {} entries (`u64` key, `u64` value) in a cache of as many:\n",
        thousands(ENTRIES as usize)
    );
    println!("| | bytes per entry | beyond key and value |");
    println!("|---|---:|---:|");
    let key_and_value = (2 * std::mem::size_of::<u64>()) as f64;
    for (name, bytes) in &entries {
        println!("| {name} | {bytes:.0} | {:.0} |", bytes - key_and_value);
    }

    let waiting = runtime.block_on(waiting());
    let floor = waiting[0].1.per_caller;
    println!(
        "\nHeap per waiting caller, {} tasks on one cold key (one Tokio task each, its future \
         included):\n",
        thousands(CALLERS)
    );
    println!(
        "| | bytes per waiting caller | beyond a bare task | size of the caller's future | origin calls |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, w) in &waiting {
        println!(
            "| {name} | {:.0} | {:.0} | {} | {} |",
            w.per_caller,
            w.per_caller - floor,
            w.future_size,
            thousands(w.origin_calls)
        );
    }
}
