//! Negative caching (`cache_errors`): a hot id that is not found costs one origin call per
//! `for`, not one per burst; other errors are never kept; an invalidation, during the load
//! or after it, keeps a stale "not found" from being served. Time runs on Tokio's paused
//! clock; every wait is bounded.
use crate::common;

use common::bounded;
use futures_util::future::join_all;
use stampede::cached;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Not `Clone`, as `sqlx::Error` is not.
#[derive(Debug)]
pub enum AppError {
    NotFound(u64),
    Down,
    Cache(stampede::Error),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::NotFound(id) => write!(f, "user {id} not found"),
            AppError::Down => f.write_str("the database is down"),
            AppError::Cache(error) => error.fmt(f),
        }
    }
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

fn is_not_found(error: &AppError) -> bool {
    matches!(error, AppError::NotFound(_))
}

/// Whichever form a caller got, the origin's error.
fn original(error: &AppError) -> &AppError {
    match error {
        AppError::Cache(shared) => shared.origin_error::<AppError>().unwrap_or(error),
        error => error,
    }
}

static QUERIES: AtomicUsize = AtomicUsize::new(0);

/// Ids below 100 exist; 0 is "the database is down".
#[cached(fresh = "60s", cache_errors(if = is_not_found, for = "5s"))]
async fn find_user(id: u64) -> Result<String, AppError> {
    QUERIES.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    match id {
        0 => Err(AppError::Down),
        id if id < 100 => Ok(format!("user-{id}")),
        id => Err(AppError::NotFound(id)),
    }
}

fn queries() -> usize {
    QUERIES.load(Ordering::SeqCst)
}

/// One test, because the function's counters are shared by every call of the binary.
#[tokio::test(start_paused = true)]
async fn a_hot_missing_id_costs_one_origin_call_per_ttl_not_per_burst() {
    let burst = || bounded(join_all((0..50).map(|_| find_user(404))));

    for answer in burst().await {
        let error = answer.unwrap_err();
        assert!(matches!(original(&error), AppError::NotFound(404)));
    }
    assert_eq!(queries(), 1, "the first burst: one coalesced origin call");

    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(1)).await;
        for answer in burst().await {
            let error = answer.unwrap_err();
            assert!(matches!(original(&error), AppError::NotFound(404)));
            assert_eq!(error.to_string(), "user 404 not found");
        }
    }
    assert_eq!(
        queries(),
        1,
        "three more bursts within `for`: no origin call"
    );
    assert_eq!(FIND_USER.stats().error_hits, 150);

    tokio::time::advance(Duration::from_secs(3)).await; // 6 s: past `for`
    let _ = burst().await;
    assert_eq!(queries(), 2, "past `for`: one origin call again");

    // Other errors are never kept.
    let before = queries();
    for _ in 0..2 {
        let error = bounded(find_user(0)).await.unwrap_err();
        assert!(matches!(original(&error), AppError::Down));
    }
    assert_eq!(queries(), before + 2, "`Down` is not kept");

    // An invalidation drops a kept error: the row may have just been created.
    let before = queries();
    assert!(bounded(find_user(405)).await.is_err());
    assert!(bounded(find_user(405)).await.is_err());
    assert_eq!(queries(), before + 1, "kept");
    FIND_USER.invalidate(&405).await.unwrap();
    assert!(bounded(find_user(405)).await.is_err());
    assert_eq!(queries(), before + 2, "invalidated: asked again");
}

static GATE: Semaphore = Semaphore::const_new(0);
static GATED_QUERIES: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s", cache_errors(if = is_not_found, for = "5s"))]
async fn find_gated(id: u64) -> Result<String, AppError> {
    if GATED_QUERIES.fetch_add(1, Ordering::SeqCst) == 0 {
        GATE.acquire().await.expect("open").forget();
    }
    Err(AppError::NotFound(id))
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_during_the_failing_load_keeps_its_error_out() {
    let load = tokio::spawn(find_gated(7));
    bounded(async {
        while GATED_QUERIES.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    // The row appears and the writer invalidates while the lookup is still running.
    FIND_GATED.invalidate(&7).await.unwrap();
    GATE.add_permits(1);
    assert!(
        bounded(load).await.unwrap().is_err(),
        "its caller still gets it"
    );
    assert!(bounded(find_gated(7)).await.is_err());
    assert_eq!(
        GATED_QUERIES.load(Ordering::SeqCst),
        2,
        "the error computed before the invalidation was not kept"
    );
    assert!(bounded(find_gated(7)).await.is_err());
    assert_eq!(GATED_QUERIES.load(Ordering::SeqCst), 2, "the new one is");
}

#[tokio::test(start_paused = true)]
async fn the_engine_keeps_errors_its_policy_chooses() {
    let policy = stampede::Policy::builder("negative-engine")
        .fresh(Duration::from_secs(60))
        .cache_errors(Duration::from_secs(5), |error: &String| {
            error == "not found"
        })
        .build()
        .unwrap();
    let cache: stampede::Cache<u64, String, String> =
        stampede::CacheBuilder::new(policy, |error| error.to_string()).build();
    let calls = &AtomicUsize::new(0);
    let load = |id: u64| {
        cache.load_inline(id, move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<String, _>(if id == 1 { "not found" } else { "down" }.to_owned())
        })
    };
    for _ in 0..3 {
        assert_eq!(bounded(load(1)).await, Err("not found".to_owned()));
        assert_eq!(bounded(load(2)).await, Err("down".to_owned()));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1 + 3,
        "one `not found`, every `down`"
    );
    assert_eq!(cache.stats().error_hits, 2);
}
