//! The shapes people write every day: a borrowed pool cloned for the origin, a method
//! whose `self` is cloned, plain `fn`s called from threads, `Option` returns. Time windows
//! run on Tokio's paused clock; every wait is bounded.
use crate::common;

use common::{bounded, eventually};
use serde::{Deserialize, Serialize};
use stampede::{cached, LeaderMode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TenantId(String);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    tenant: String,
    id: u64,
    loaded: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AppError {
    Cache(stampede::Error),
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

/// A pool-like handle: cheap to clone (its clones share one state), counts its queries,
/// and holds every query after the first until the test opens its gate.
#[derive(Clone, Default)]
pub struct PgPool {
    shared: Arc<PoolState>,
}

struct PoolState {
    queries: AtomicUsize,
    gate: Semaphore,
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState {
            queries: AtomicUsize::new(0),
            gate: Semaphore::new(0),
        }
    }
}

impl PgPool {
    async fn fetch_profile(&self, tenant: &TenantId, id: u64) -> Result<Profile, AppError> {
        let n = self.shared.queries.fetch_add(1, Ordering::SeqCst) + 1;
        if n > 1 {
            self.shared.gate.acquire().await.expect("open").forget();
        }
        Ok(Profile {
            tenant: tenant.0.clone(),
            id,
            loaded: n,
        })
    }

    fn queries(&self) -> usize {
        self.shared.queries.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.shared.gate.add_permits(1);
    }
}

/// The attribute guide's first function (`docs/attribute.md`), as written there.
#[cached(fresh = "60s", stale = "30s", xfetch, key = (tenant, id), clone(db))]
pub async fn load_profile(tenant: TenantId, id: u64, db: &PgPool) -> Result<Profile, AppError> {
    db.fetch_profile(&tenant, id).await
}

#[tokio::test(start_paused = true)]
async fn the_quickstart_shape_answers_a_stale_window_caller_without_waiting_for_the_origin() {
    let db = PgPool::default();
    let acme = || TenantId("acme".into());
    assert_eq!(LOAD_PROFILE.leader_mode(), LeaderMode::Detached);
    let first = bounded(load_profile(acme(), 7, &db)).await.unwrap();
    assert_eq!(first.loaded, 1);

    tokio::time::sleep(Duration::from_secs(70)).await; // stale now
                                                       // The refresh's query is held until the gate opens, which happens only after this
                                                       // caller has its answer: had it waited for the origin, `bounded` would fail.
    let stale = bounded(load_profile(acme(), 7, &db)).await.unwrap();
    assert_eq!(stale.loaded, 1, "the old value, at once");
    eventually(|| db.queries() == 2).await;
    let again = bounded(load_profile(acme(), 7, &db)).await.unwrap();
    assert_eq!(
        again.loaded, 1,
        "still the old value while the refresh is held"
    );
    assert_eq!(db.queries(), 2, "one refresh for both stale callers");

    db.open();
    eventually(|| LOAD_PROFILE.stats().in_flight == 0).await;
    let refreshed = bounded(load_profile(acme(), 7, &db)).await.unwrap();
    assert_eq!(refreshed.loaded, 2, "the refreshed value");
    assert_eq!(LOAD_PROFILE.stats().origin_calls, 2);
    assert_eq!(LOAD_PROFILE.stats().stale_hits, 2);
}

/// A service whose methods share its pool; `self` is cloned for the origin.
#[derive(Clone, Default)]
pub struct Directory {
    pool: PgPool,
}

impl Directory {
    #[cached(fresh = "1s", stale = "10s", clone(self))]
    async fn profile(&self, id: u64) -> Result<Profile, AppError> {
        self.pool.fetch_profile(&TenantId("dir".into()), id).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_method_with_a_cloned_self_refreshes_in_the_background() {
    let directory = Directory::default();
    assert_eq!(Directory::PROFILE.leader_mode(), LeaderMode::Detached);
    assert_eq!(bounded(directory.profile(3)).await.unwrap().loaded, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stale = bounded(directory.profile(3)).await.unwrap();
    assert_eq!(
        stale.loaded, 1,
        "the old value, while the refresh waits on the gate"
    );
    eventually(|| directory.pool.queries() == 2).await;
    directory.pool.open();
    eventually(|| Directory::PROFILE.stats().in_flight == 0).await;
    assert_eq!(bounded(directory.profile(3)).await.unwrap().loaded, 2);
}

trait Store {
    async fn name_of(&self, id: u64) -> Result<String, AppError>;
}

#[derive(Default)]
struct CountingStore {
    queries: AtomicUsize,
}

impl Store for CountingStore {
    #[cached(fresh = "60s", trait_impl, skip(self))]
    async fn name_of(&self, id: u64) -> Result<String, AppError> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(format!("name-{id}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_of_a_trait_impl_is_cached_and_coalesced() {
    let store = Arc::new(CountingStore::default());
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.name_of(9).await })
        })
        .collect();
    for call in calls {
        assert_eq!(bounded(call).await.unwrap(), Ok("name-9".to_owned()));
    }
    assert_eq!(store.queries.load(Ordering::SeqCst), 1);
    assert_eq!(bounded(store.name_of(9)).await, Ok("name-9".to_owned()));
    assert_eq!(store.queries.load(Ordering::SeqCst), 1, "a hit");
}

static FOUND_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", cache_none = false)]
async fn find_user(id: u64) -> Option<String> {
    FOUND_LOOKUPS.fetch_add(1, Ordering::SeqCst);
    (id != 0).then(|| format!("user-{id}"))
}

#[tokio::test(start_paused = true)]
async fn with_cache_none_false_a_none_is_answered_but_not_stored() {
    assert_eq!(bounded(find_user(0)).await, None);
    assert_eq!(bounded(find_user(0)).await, None);
    assert_eq!(
        FOUND_LOOKUPS.load(Ordering::SeqCst),
        2,
        "each None loads again"
    );
    assert_eq!(bounded(find_user(5)).await.as_deref(), Some("user-5"));
    assert_eq!(bounded(find_user(5)).await.as_deref(), Some("user-5"));
    assert_eq!(FOUND_LOOKUPS.load(Ordering::SeqCst), 3, "a Some is cached");
}

static DEFAULT_LOOKUPS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn find_user_by_default(id: u64) -> Result<Option<String>, AppError> {
    DEFAULT_LOOKUPS.fetch_add(1, Ordering::SeqCst);
    Ok((id != 0).then(|| format!("user-{id}")))
}

#[tokio::test(start_paused = true)]
async fn by_default_a_none_is_cached_like_any_value() {
    assert_eq!(bounded(find_user_by_default(0)).await, Ok(None));
    assert_eq!(bounded(find_user_by_default(0)).await, Ok(None));
    assert_eq!(DEFAULT_LOOKUPS.load(Ordering::SeqCst), 1);
}

const THREADS: u64 = 8;
static PARSES: AtomicUsize = AtomicUsize::new(0);

/// A plain `fn`: its callers are threads.
#[cached(fresh = "60s")]
fn parse_config(id: u64) -> Result<String, AppError> {
    PARSES.fetch_add(1, Ordering::SeqCst);
    // Held until every other thread waits on this load.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while PARSE_CONFIG.stats().coalesced < THREADS - 1 {
        assert!(
            std::time::Instant::now() < until,
            "the other threads never joined"
        );
        std::thread::yield_now();
    }
    Ok(format!("config-{id}"))
}

#[test]
fn a_plain_fn_called_by_threads_at_once_runs_its_origin_once() {
    let start = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                start.wait();
                assert_eq!(parse_config(3), Ok("config-3".to_owned()));
            });
        }
    });
    assert_eq!(PARSES.load(Ordering::SeqCst), 1);
    assert_eq!(parse_config(3), Ok("config-3".to_owned()), "a hit");
    let stats = PARSE_CONFIG.stats();
    assert_eq!((stats.origin_calls, stats.fresh_hits), (1, 1));
    assert_eq!(PARSE_CONFIG.leader_mode(), LeaderMode::Inline);
}

static SQUARES: AtomicUsize = AtomicUsize::new(0);

/// A plain value from a plain `fn`, with a stale window.
#[cached(fresh = "1s", stale = "10s")]
fn square(n: u64) -> u64 {
    SQUARES.fetch_add(1, Ordering::SeqCst);
    n * n + SQUARES.load(Ordering::SeqCst) as u64 - 1
}

#[tokio::test(start_paused = true)]
async fn a_plain_fn_serves_its_stale_window_and_refreshes_in_the_caller() {
    assert_eq!(square(4), 16);
    tokio::time::sleep(Duration::from_secs(2)).await; // stale now
    assert_eq!(
        square(4),
        17,
        "the caller that triggers the refresh gets its value"
    );
    assert_eq!(square(4), 17);
    assert_eq!(SQUARES.load(Ordering::SeqCst), 2);
    assert_eq!(SQUARE.stats().stale_hits, 1);
}
