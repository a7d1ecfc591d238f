//! What a caller can ask of one call or one key beyond a load: `stampede::bypass` and
//! `stampede::refresh` for one call, and a write-through `insert` on the handle and on
//! `Cache`, fenced against older loads (in memory, and across replicas on Redis). Every
//! wait is bounded.
use crate::common;

use common::{bounded, eventually, AppError};
use stampede::{cached, Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use testkit::RedisServer;
use tokio::sync::Semaphore;

static VERSION: AtomicUsize = AtomicUsize::new(0);
static PRICE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Each origin call sees the next version of the price.
#[cached(fresh = "1h")]
async fn price(id: u64) -> Result<String, AppError> {
    PRICE_CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{id}@v{}", VERSION.fetch_add(1, Ordering::SeqCst)))
}

fn price_calls() -> usize {
    PRICE_CALLS.load(Ordering::SeqCst)
}

#[tokio::test]
async fn bypass_calls_the_origin_and_leaves_the_cache_as_it_was() {
    let cached = bounded(price(1)).await.unwrap();
    assert_eq!(price_calls(), 1);
    let direct = bounded(stampede::bypass(price(1))).await.unwrap();
    assert_ne!(direct, cached, "a new origin answer");
    assert_eq!(price_calls(), 2);
    assert_eq!(
        bounded(price(1)).await.unwrap(),
        cached,
        "the cache kept its value"
    );
    assert_eq!(price_calls(), 2, "a hit");
}

static LABEL_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "1h")]
async fn label(id: u64) -> Result<String, AppError> {
    LABEL_CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("label-{id}"))
}

static PAGE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// An origin that calls another cached function.
#[cached(fresh = "1h")]
async fn page(id: u64) -> Result<String, AppError> {
    PAGE_CALLS.fetch_add(1, Ordering::SeqCst);
    let label = label(id).await?;
    Ok(format!(
        "page {} with {label}",
        PAGE_CALLS.load(Ordering::SeqCst)
    ))
}

#[tokio::test]
async fn refresh_replaces_the_value_and_only_for_the_call_it_wraps() {
    assert_eq!(bounded(page(3)).await.unwrap(), "page 1 with label-3");
    let refreshed = bounded(stampede::refresh(page(3))).await.unwrap();
    assert_eq!(refreshed, "page 2 with label-3");
    assert_eq!(
        LABEL_CALLS.load(Ordering::SeqCst),
        1,
        "the origin's own cached call was served from its cache, not refreshed"
    );
    assert_eq!(bounded(page(3)).await.unwrap(), refreshed, "stored");
    assert_eq!(PAGE_CALLS.load(Ordering::SeqCst), 2);
    assert_eq!(bounded(page(4)).await.unwrap(), "page 3 with label-4");
    assert_eq!(
        bounded(page(4)).await.unwrap(),
        "page 3 with label-4",
        "the next call is cached as usual"
    );
}

static CONFIG_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "1h")]
fn config(id: u64) -> usize {
    let _ = id;
    CONFIG_CALLS.fetch_add(1, Ordering::SeqCst) + 1
}

#[test]
fn plain_fns_bypass_and_refresh_on_their_thread() {
    assert_eq!(config(1), 1);
    assert_eq!(config(1), 1);
    assert_eq!(stampede::bypass_blocking(|| config(1)), 2);
    assert_eq!(config(1), 1, "bypass stored nothing");
    assert_eq!(stampede::refresh_blocking(|| config(1)), 3);
    assert_eq!(config(1), 3, "refresh stored its value");
    assert_eq!(CONFIG_CALLS.load(Ordering::SeqCst), 3);
}

static GATE: Semaphore = Semaphore::const_new(0);
static STOCK_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The first origin call is held at the gate, returning what it read before it.
#[cached(fresh = "1h")]
async fn stock(id: u64) -> Result<String, AppError> {
    let _ = id;
    if STOCK_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
        GATE.acquire().await.expect("open").forget();
        return Ok("read before the write".to_owned());
    }
    Ok("loaded".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_is_not_overwritten_by_a_load_that_started_before_it() {
    let older = tokio::spawn(stock(5));
    eventually(|| STOCK_CALLS.load(Ordering::SeqCst) == 1).await;
    bounded(STOCK.insert(&5, "written".to_owned()))
        .await
        .unwrap();
    GATE.add_permits(1);
    assert_eq!(
        bounded(older).await.unwrap().unwrap(),
        "read before the write",
        "the older load still answers its caller"
    );
    assert_eq!(
        bounded(stock(5)).await.unwrap(),
        "written",
        "but did not store"
    );
    assert_eq!(
        STOCK_CALLS.load(Ordering::SeqCst),
        1,
        "a hit on the inserted value"
    );
}

fn replica(redis: &RedisServer) -> Runtime {
    Runtime::builder()
        .backend(Backend::redis(redis.url()))
        .build()
        .unwrap()
}

fn shared_cache(runtime: &Runtime) -> Cache<u64, String, AppError> {
    let policy = Policy::builder("write-through")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy).runtime(runtime).build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_reaches_every_replica_and_fences_their_older_loads() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (replica(&redis), replica(&redis));
    let (writer, reader) = (shared_cache(&one), shared_cache(&other));
    let gate = Arc::new(Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));

    // The other replica starts a load, which reads the origin before the write.
    let older = {
        let (reader, gate, calls) = (reader.clone(), gate.clone(), calls.clone());
        tokio::spawn(async move {
            reader
                .load(9, move || async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    gate.acquire().await.expect("open").forget();
                    Ok("read before the write".to_owned())
                })
                .await
        })
    };
    eventually(|| calls.load(Ordering::SeqCst) == 1).await;
    bounded(writer.insert(9, "written".to_owned()))
        .await
        .unwrap();
    gate.add_permits(1);
    assert_eq!(
        bounded(older).await.unwrap().unwrap(),
        "read before the write"
    );

    for cache in [&reader, &writer] {
        let got = bounded(cache.load(9, || async { Ok("from the origin".to_owned()) })).await;
        assert_eq!(got.unwrap(), "written", "both replicas read the write");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        (reader.stats().origin_calls, writer.stats().origin_calls),
        (1, 0)
    );
}

pub struct Db;

static PRODUCT_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "1h", skip(db))]
async fn load_product(tenant: &str, id: u64, db: &Db) -> Result<String, AppError> {
    let _ = db;
    PRODUCT_CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{tenant}/{id}"))
}

#[tokio::test]
async fn the_handle_invalidates_with_the_functions_own_arguments() {
    let tenant: &str = "acme";
    assert_eq!(
        bounded(load_product(tenant, 7, &Db)).await.unwrap(),
        "acme/7"
    );
    assert_eq!(
        bounded(load_product(tenant, 7, &Db)).await.unwrap(),
        "acme/7"
    );
    assert_eq!(PRODUCT_CALLS.load(Ordering::SeqCst), 1);

    assert_eq!(LOAD_PRODUCT.key((tenant, 7)), ("acme".to_owned(), 7));
    bounded(LOAD_PRODUCT.invalidate_args((tenant, 7)))
        .await
        .unwrap();
    assert_eq!(
        bounded(load_product(tenant, 7, &Db)).await.unwrap(),
        "acme/7"
    );
    assert_eq!(
        PRODUCT_CALLS.load(Ordering::SeqCst),
        2,
        "invalidated: loaded again"
    );

    let key = LOAD_PRODUCT.key((tenant, 8));
    bounded(LOAD_PRODUCT.insert(&key, "written".to_owned()))
        .await
        .unwrap();
    assert_eq!(
        bounded(load_product(tenant, 8, &Db)).await.unwrap(),
        "written"
    );
    assert_eq!(PRODUCT_CALLS.load(Ordering::SeqCst), 2);
}

#[derive(Default)]
pub struct Directory {
    queries: AtomicUsize,
}

impl Directory {
    #[cached(fresh = "1h", skip(self))]
    async fn person(&self, name: &str) -> Result<String, AppError> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        Ok(name.to_uppercase())
    }
}

#[tokio::test]
async fn a_methods_handle_takes_its_one_borrowed_argument_too() {
    let directory = Directory::default();
    assert_eq!(bounded(directory.person("ada")).await.unwrap(), "ADA");
    bounded(Directory::PERSON.invalidate_args(("ada",)))
        .await
        .unwrap();
    assert_eq!(bounded(directory.person("ada")).await.unwrap(), "ADA");
    assert_eq!(directory.queries.load(Ordering::SeqCst), 2);
}
