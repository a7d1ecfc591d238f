//! `#[cached]` on real functions: every option honoured at run time, counted in origin
//! calls. Every cache here reads Tokio's clock (installed with the runtime), so the tests
//! about time windows run on the paused clock and assert exact outcomes.
use crate::common;

use common::{bounded, eventually};
use serde::{Deserialize, Serialize};
use stampede::{cached, LeaderMode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    NotFound(u64),
    Cache(stampede::Error),
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

/// A database handle that is borrowed, never cloned, and counts its queries.
#[derive(Default)]
pub struct Db {
    queries: AtomicUsize,
}

impl Db {
    async fn fetch(&self, tenant: &TenantId, id: u64) -> Result<Profile, AppError> {
        let n = self.queries.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
        if id == 0 {
            return Err(AppError::NotFound(id));
        }
        Ok(Profile {
            tenant: tenant.0.clone(),
            id,
            loaded: n,
        })
    }
    fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

/// The quickstart: tenant + id key, borrowed db skipped, app error with From.
#[cached(fresh = "60s", key = (tenant, id), skip(db))]
async fn load_profile(tenant: TenantId, id: u64, db: &Db) -> Result<Profile, AppError> {
    db.fetch(&tenant, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowed_pool_and_a_tenant_key_coalesce_to_one_query() {
    let db = Arc::new(Db::default());
    let tenant = TenantId("acme".into());
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let (db, tenant) = (db.clone(), tenant.clone());
            tokio::spawn(async move { load_profile(tenant, 7, &db).await })
        })
        .collect();
    for call in calls {
        let profile = bounded(call).await.unwrap().unwrap();
        assert_eq!((profile.id, profile.loaded), (7, 1));
    }
    assert_eq!(db.queries(), 1);
    // Another tenant is another key.
    let other = load_profile(TenantId("globex".into()), 7, &db)
        .await
        .unwrap();
    assert_eq!(other.tenant, "globex");
    assert_eq!(db.queries(), 2);
    assert_eq!(LOAD_PROFILE.leader_mode(), LeaderMode::Inline);
    assert_eq!(LOAD_PROFILE.stats().origin_calls, 2);
    LOAD_PROFILE
        .invalidate(&(TenantId("acme".into()), 7))
        .await
        .unwrap();
    load_profile(TenantId("acme".into()), 7, &db).await.unwrap();
    assert_eq!(db.queries(), 3);
}

static SQUARES: AtomicUsize = AtomicUsize::new(0);

/// A plain value, owned arguments: detached mode, cannot fail.
#[cached(fresh = "150ms")]
async fn square(n: u64) -> u64 {
    SQUARES.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(20)).await;
    n * n
}

#[tokio::test(start_paused = true)]
async fn fresh_values_are_served_until_they_expire() {
    assert_eq!(SQUARE.leader_mode(), LeaderMode::Detached);
    assert_eq!(square(12).await, 144);
    assert_eq!(square(12).await, 144);
    assert_eq!(SQUARES.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(300)).await; // past `fresh`
    assert_eq!(square(12).await, 144);
    assert_eq!(SQUARES.load(Ordering::SeqCst), 2);
    assert_eq!(SQUARE.stats().fresh_hits, 1);
}

static STALE_LOADS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "100ms", stale = "60s")]
async fn stale_counter(key: u32) -> Result<usize, stampede::Error> {
    let n = STALE_LOADS.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = key;
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn the_stale_window_serves_the_old_value_while_one_refresh_runs() {
    assert_eq!(stale_counter(1).await, Ok(1));
    tokio::time::sleep(Duration::from_millis(200)).await; // stale now
    let calls: Vec<_> = (0..50).map(|_| tokio::spawn(stale_counter(1))).collect();
    for call in calls {
        assert_eq!(
            bounded(call).await.unwrap(),
            Ok(1),
            "the stale value, at once"
        );
    }
    eventually(|| STALE_COUNTER.stats().origin_calls == 2 && STALE_COUNTER.stats().in_flight == 0)
        .await;
    assert_eq!(stale_counter(1).await, Ok(2));
    assert_eq!(
        STALE_LOADS.load(Ordering::SeqCst),
        2,
        "one refresh for fifty stale hits"
    );
}

static EARLY_LOADS: AtomicUsize = AtomicUsize::new(0);

/// β so large that practically every fresh hit asks for an early refresh.
#[cached(fresh = "60s", xfetch(beta = 1000000.0))]
async fn early(key: u32) -> Result<usize, stampede::Error> {
    let n = EARLY_LOADS.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = key;
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfetch_refreshes_a_fresh_value_early_once() {
    assert_eq!(early(1).await, Ok(1));
    let calls: Vec<_> = (0..20).map(|_| tokio::spawn(early(1))).collect();
    for call in calls {
        assert_eq!(
            bounded(call).await.unwrap(),
            Ok(1),
            "fresh hits answer at once"
        );
    }
    eventually(|| EARLY.stats().in_flight == 0 && EARLY.stats().origin_calls == 2).await;
    assert_eq!(
        EARLY.stats().early_refreshes,
        1,
        "twenty hits, one early refresh"
    );
    assert_eq!(early(1).await, Ok(2));
}

static SOURCE_CLONES: AtomicUsize = AtomicUsize::new(0);

/// A borrowed handle that counts its clones: `clone(source)` takes one for the origin.
pub struct Source;

impl Clone for Source {
    fn clone(&self) -> Self {
        SOURCE_CLONES.fetch_add(1, Ordering::SeqCst);
        Source
    }
}

#[cached(fresh = "60s", key = id, clone(source))]
async fn through_source(id: u32, source: &Source) -> Result<u32, stampede::Error> {
    let _ = source;
    Ok(id)
}

#[tokio::test]
async fn a_fresh_hit_clones_nothing_for_the_origin() {
    assert_eq!(bounded(through_source(1, &Source)).await, Ok(1));
    assert_eq!(SOURCE_CLONES.load(Ordering::SeqCst), 1, "the miss's origin");
    for _ in 0..3 {
        assert_eq!(bounded(through_source(1, &Source)).await, Ok(1));
    }
    assert_eq!(
        SOURCE_CLONES.load(Ordering::SeqCst),
        1,
        "hits clone nothing"
    );
    assert_eq!(THROUGH_SOURCE.stats().fresh_hits, 3);
}

static SLOW_LOADS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", timeout = "50ms")]
async fn slow(key: u32) -> Result<u32, AppError> {
    SLOW_LOADS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(key)
}

#[tokio::test(start_paused = true)]
async fn a_caller_past_its_deadline_gets_timeout_and_the_load_still_lands() {
    let got = slow(5).await;
    assert!(
        matches!(got, Err(AppError::Cache(stampede::Error::Timeout { .. }))),
        "{got:?}"
    );
    eventually(|| SLOW.stats().in_flight == 0).await;
    assert_eq!(slow(5).await, Ok(5), "the detached load filled the cache");
    assert_eq!(SLOW_LOADS.load(Ordering::SeqCst), 1);
}

static UNCOALESCED_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", coalesce = false)]
async fn uncoalesced(key: u32) -> u32 {
    UNCOALESCED_CALLS.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesce_false_lets_every_concurrent_miss_call_the_origin() {
    let calls: Vec<_> = (0..10).map(|_| tokio::spawn(uncoalesced(3))).collect();
    for call in calls {
        assert_eq!(bounded(call).await.unwrap(), 3);
    }
    assert_eq!(UNCOALESCED_CALLS.load(Ordering::SeqCst), 10);
}

static FLAKY_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "100ms", stale_if_error = "60s")]
async fn flaky(key: u32) -> Result<usize, AppError> {
    let n = FLAKY_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if n > 1 {
        return Err(AppError::NotFound(key as u64));
    }
    Ok(n)
}

#[tokio::test(start_paused = true)]
async fn stale_if_error_answers_a_failing_origin_with_the_last_value() {
    assert_eq!(flaky(1).await, Ok(1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(flaky(1).await, Ok(1), "origin failed; last value served");
    assert_eq!(flaky(1).await, Ok(1));
    assert_eq!(
        FLAKY_CALLS.load(Ordering::SeqCst),
        2,
        "retries are throttled"
    );
    assert_eq!(FLAKY.stats().fallbacks, 1);
}

/// A service with a `&self` method and an associated function.
pub struct Directory {
    db: Db,
}

impl Directory {
    /// Doc comments and other attributes stay on the function.
    #[cached(fresh = "60s", skip(self))]
    #[inline]
    pub async fn profile(&self, tenant: TenantId, id: u64) -> Result<Profile, AppError> {
        self.db.fetch(&tenant, id).await
    }

    #[cached(fresh = "60s", name = "directory-size")]
    pub async fn size(shard: u8) -> usize {
        shard as usize * 10
    }
}

/// A second impl with a method of the same name: a cache of its own.
pub struct Archive;

impl Archive {
    #[cached(fresh = "60s", skip(self))]
    pub async fn profile(&self, tenant: TenantId, id: u64) -> Result<Profile, AppError> {
        Ok(Profile {
            tenant: tenant.0,
            id,
            loaded: 0,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_method_coalesces_and_keeps_its_own_cache() {
    let directory = Arc::new(Directory { db: Db::default() });
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let directory = directory.clone();
            tokio::spawn(async move { directory.profile(TenantId("acme".into()), 1).await })
        })
        .collect();
    for call in calls {
        assert_eq!(bounded(call).await.unwrap().unwrap().loaded, 1);
    }
    assert_eq!(directory.db.queries(), 1);
    assert_eq!(Directory::PROFILE.leader_mode(), LeaderMode::Inline);
    let archived = Archive.profile(TenantId("acme".into()), 1).await.unwrap();
    assert_eq!(
        archived.loaded, 0,
        "same method name, another impl, another cache"
    );
    assert_eq!(Archive::PROFILE.stats().origin_calls, 1);
    assert_eq!(Directory::PROFILE.stats().origin_calls, 1);
    assert_eq!(Directory::size(3).await, 30);
    assert_eq!(
        Directory::SIZE.cache().policy().name().as_ref(),
        "directory-size"
    );
}

/// Every policy option reaches the runtime's `Policy`.
#[cached(
    fresh = "1m30s",
    stale = "30s",
    stale_if_error = "5m",
    jitter = 0.15,
    timeout = "2s",
    load_timeout = "1500ms",
    admission = "db",
    lease = "5s",
    name = "user-profile",
    version = 3,
    capacity = 10_000,
    xfetch,
    key = id,
    skip(verbose)
)]
async fn configured(id: u64, verbose: bool) -> Result<u64, AppError> {
    let _ = verbose;
    Ok(id)
}

#[test]
fn every_option_reaches_the_policy() {
    let cache = CONFIGURED.cache();
    let policy = cache.policy();
    assert_eq!(policy.name().as_ref(), "user-profile");
    assert_eq!(policy.fresh(), Duration::from_secs(90));
    assert_eq!(policy.stale(), Duration::from_secs(30));
    assert_eq!(policy.stale_if_error(), Some(Duration::from_secs(300)));
    assert_eq!(policy.jitter(), 0.15);
    assert_eq!(policy.timeout(), Some(Duration::from_secs(2)));
    assert_eq!(policy.load_timeout(), Some(Duration::from_millis(1500)));
    assert_eq!(policy.admission().map(|a| a.as_ref()), Some("db"));
    assert_eq!(policy.lease(), Duration::from_secs(5));
    assert_eq!(policy.version(), 3);
    assert_eq!(policy.capacity(), 10_000);
    assert_eq!(policy.xfetch_beta(), Some(1.0));
    assert!(policy.coalesce());
}

#[cached(fresh = "60s", xfetch = false)]
async fn xfetch_written_off(id: u64) -> u64 {
    id
}

#[cached(fresh = "60s", xfetch(beta = 0.0))]
async fn xfetch_beta_zero(id: u64) -> u64 {
    id
}

#[test]
fn xfetch_false_and_a_beta_of_zero_leave_xfetch_off() {
    assert_eq!(XFETCH_WRITTEN_OFF.cache().policy().xfetch_beta(), None);
    assert_eq!(XFETCH_BETA_ZERO.cache().policy().xfetch_beta(), None);
}

/// An error without `From<stampede::Error>`, mapped by a function.
#[derive(Debug, Clone, PartialEq)]
pub struct Opaque(String);

fn opaque(error: stampede::Error) -> Opaque {
    Opaque(error.to_string())
}

#[cached(fresh = "60s", timeout = "20ms", map_error = opaque)]
async fn mapped(key: u32) -> Result<u32, Opaque> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(key)
}

#[tokio::test(start_paused = true)]
async fn map_error_turns_framework_failures_into_the_functions_error() {
    let got = mapped(1).await.unwrap_err();
    assert!(got.0.contains("deadline of 20ms"), "{got:?}");
}

/// A value that is not serde: `local` keeps it in memory only.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    user: u64,
}

#[cached(fresh = "60s", local)]
async fn session(user: u64) -> Session {
    Session { user }
}

/// A key that is an expression, with its type.
#[cached(fresh = "60s", key = format!("{}:{id}", tenant.0), key_type = String)]
async fn by_expression(tenant: TenantId, id: u64) -> String {
    format!("{}/{id}", tenant.0)
}

/// A borrowed `&str` argument keys as an owned `String`.
#[cached(fresh = "60s")]
async fn greeting(name: &str) -> String {
    format!("hello, {name}")
}

#[tokio::test]
async fn keys_from_expressions_and_borrowed_strings() {
    assert_eq!(session(4).await, Session { user: 4 });
    assert_eq!(by_expression(TenantId("acme".into()), 2).await, "acme/2");
    by_expression(TenantId("acme".into()), 2).await;
    assert_eq!(BY_EXPRESSION.stats().origin_calls, 1);
    BY_EXPRESSION
        .invalidate(&"acme:2".to_string())
        .await
        .unwrap();
    by_expression(TenantId("acme".into()), 2).await;
    assert_eq!(BY_EXPRESSION.stats().origin_calls, 2);
    assert_eq!(greeting("ada").await, "hello, ada");
    assert_eq!(greeting("ada").await, "hello, ada");
    assert_eq!(GREETING.stats().origin_calls, 1);
    assert_eq!(GREETING.leader_mode(), LeaderMode::Inline);
}

static PARTIAL: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn report(id: u64) -> Result<u64, AppError> {
    PARTIAL.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(id * 2)
}

#[tokio::test]
async fn nineteen_callers_dropped_the_last_gets_the_value_from_one_call() {
    let calls: Vec<_> = (0..20).map(|_| tokio::spawn(report(21))).collect();
    tokio::task::yield_now().await;
    let mut calls = calls.into_iter();
    let last = calls.next_back().unwrap();
    calls.for_each(|c| c.abort());
    assert_eq!(bounded(last).await.unwrap(), Ok(42));
    assert_eq!(PARTIAL.load(Ordering::SeqCst), 1);
}

static BOOMS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn boom(id: u64) -> u64 {
    if BOOMS.fetch_add(1, Ordering::SeqCst) == 0 {
        panic!("first call fails");
    }
    id
}

#[tokio::test]
async fn a_panicking_plain_origin_panics_its_callers_and_the_next_call_succeeds() {
    let first = tokio::spawn(boom(9)).await;
    assert!(first.unwrap_err().is_panic());
    assert_eq!(BOOM.stats().in_flight, 0);
    assert_eq!(boom(9).await, 9);
}
