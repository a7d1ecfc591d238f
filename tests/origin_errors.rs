//! Origin errors that are not `Clone` (shaped like `sqlx::Error`, `anyhow::Error`,
//! `io::Error`) work as they are: the caller whose call ran the origin gets the original
//! when nobody else shares it; every other caller of the load gets the wrapped form, which
//! prints as the original and gives it back. Every wait is bounded.
use crate::common;

use common::bounded;
use futures_util::future::join_all;
use stampede::cached;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Shaped like `sqlx::Error`: not `Clone`, with a source behind one variant.
#[derive(Debug)]
pub enum DbError {
    RowNotFound,
    Io(std::io::Error),
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbError::RowNotFound => f.write_str("no rows returned"),
            DbError::Io(_) => f.write_str("error communicating with the database"),
        }
    }
}

impl std::error::Error for DbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DbError::Io(error) => Some(error),
            DbError::RowNotFound => None,
        }
    }
}

/// A service's error enum, as written with sqlx: no `Clone`, no `Arc`.
#[derive(Debug)]
pub enum AppError {
    Db(DbError),
    Cache(stampede::Error),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Db(error) => error.fmt(f),
            AppError::Cache(error) => error.fmt(f),
        }
    }
}

impl From<DbError> for AppError {
    fn from(error: DbError) -> Self {
        AppError::Db(error)
    }
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

/// The original behind an error a caller got, whichever form it came in.
fn original(error: &AppError) -> &AppError {
    match error {
        AppError::Cache(shared) => shared
            .origin_error::<AppError>()
            .expect("the wrapped form of the origin's error"),
        error => error,
    }
}

pub struct Db;

impl Db {
    async fn find(&self, id: u64) -> Result<String, DbError> {
        match id {
            0 => Err(DbError::RowNotFound),
            1 => Err(DbError::Io(std::io::Error::other("connection reset"))),
            id => Ok(format!("row-{id}")),
        }
    }
}

const CALLERS: usize = 20;

static INLINE_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Inline (it borrows `db`); holds its origin until every other caller has joined.
#[cached(fresh = "60s", skip(db))]
async fn find_inline(id: u64, db: &Db) -> Result<String, AppError> {
    INLINE_CALLS.fetch_add(1, Ordering::SeqCst);
    while FIND_INLINE.stats().coalesced < (CALLERS - 1) as u64 {
        tokio::task::yield_now().await;
    }
    Ok(db.find(id).await?)
}

#[tokio::test]
async fn coalesced_callers_share_an_error_that_is_not_clone() {
    let db = Db;
    let answers = bounded(join_all((0..CALLERS).map(|_| find_inline(0, &db)))).await;
    assert_eq!(INLINE_CALLS.load(Ordering::SeqCst), 1, "one origin call");
    let first = answers[0].as_ref().unwrap_err();
    for answer in &answers {
        let error = answer.as_ref().unwrap_err();
        assert!(
            matches!(error, AppError::Cache(stampede::Error::Origin(_))),
            "several callers shared the load, so each gets the wrapped form: {error:?}"
        );
        assert!(matches!(
            original(error),
            AppError::Db(DbError::RowNotFound)
        ));
        assert!(
            std::ptr::eq(original(error), original(first)),
            "one original"
        );
        assert_eq!(
            error.to_string(),
            "no rows returned",
            "prints as the original"
        );
    }

    // Errors are not cached, and alone a caller gets the original itself (every other
    // caller has joined once already, so the origin no longer waits).
    let alone = bounded(find_inline(0, &db)).await;
    assert!(matches!(alone, Err(AppError::Db(DbError::RowNotFound))));
    assert_eq!(INLINE_CALLS.load(Ordering::SeqCst), 2);
}

/// The same shape without the wait, for a caller that is alone.
#[cached(fresh = "60s", skip(db))]
async fn find_inline_alone(id: u64, db: &Db) -> Result<String, AppError> {
    Ok(db.find(id).await?)
}

#[tokio::test]
async fn a_lone_inline_caller_gets_the_original_with_its_source() {
    let db = Db;
    let got = bounded(find_inline_alone(1, &db)).await;
    let Err(AppError::Db(error @ DbError::Io(_))) = &got else {
        panic!("the original: {got:?}");
    };
    let source = std::error::Error::source(error).expect("the io error behind it");
    assert_eq!(source.to_string(), "connection reset");
    assert_eq!(FIND_INLINE_ALONE.stats().origin_calls, 1);
    // Not cached: a second call asks again.
    let again = bounded(find_inline_alone(1, &db)).await;
    assert!(matches!(again, Err(AppError::Db(DbError::Io(_)))));
    assert_eq!(FIND_INLINE_ALONE.stats().origin_calls, 2);
    assert_eq!(
        bounded(find_inline_alone(5, &db)).await.unwrap(),
        "row-5",
        "values are cached as ever"
    );
}

static DETACHED_CALLS: AtomicUsize = AtomicUsize::new(0);

/// Detached (every argument owned): no caller runs the origin.
#[cached(fresh = "60s")]
async fn find_detached(id: u64) -> Result<String, AppError> {
    DETACHED_CALLS.fetch_add(1, Ordering::SeqCst);
    while FIND_DETACHED.stats().coalesced < (CALLERS - 1) as u64 {
        tokio::task::yield_now().await;
    }
    Ok(Db.find(id).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_callers_all_get_the_shared_form() {
    let answers = bounded(join_all((0..CALLERS).map(|_| find_detached(1)))).await;
    assert_eq!(DETACHED_CALLS.load(Ordering::SeqCst), 1);
    for answer in &answers {
        let error = answer.as_ref().unwrap_err();
        assert!(matches!(error, AppError::Cache(stampede::Error::Origin(_))));
        let AppError::Db(db) = original(error) else {
            panic!("the origin's error");
        };
        let source = std::error::Error::source(db).expect("its source");
        assert_eq!(source.to_string(), "connection reset");
    }
}

static ANYHOW_CALLS: AtomicUsize = AtomicUsize::new(0);

/// `anyhow::Result` as is: anyhow's own `From` carries stampede's errors.
#[cached(fresh = "60s", skip(db))]
async fn find_anyhow(id: u64, db: &Db) -> anyhow::Result<String> {
    ANYHOW_CALLS.fetch_add(1, Ordering::SeqCst);
    while FIND_ANYHOW.stats().coalesced < (CALLERS - 1) as u64 && id == 0 {
        tokio::task::yield_now().await;
    }
    Ok(db.find(id).await?)
}

#[tokio::test]
async fn anyhow_errors_are_shared_and_the_lone_caller_gets_the_original() {
    let db = Db;
    let answers = bounded(join_all((0..CALLERS).map(|_| find_anyhow(0, &db)))).await;
    assert_eq!(ANYHOW_CALLS.load(Ordering::SeqCst), 1);
    for answer in &answers {
        let error = answer.as_ref().unwrap_err();
        assert_eq!(error.to_string(), "no rows returned");
        let shared = error
            .downcast_ref::<stampede::Error>()
            .expect("the wrapped form");
        let original = shared
            .origin_error::<anyhow::Error>()
            .expect("the original");
        assert!(matches!(
            original.downcast_ref::<DbError>(),
            Some(DbError::RowNotFound)
        ));
    }

    let alone = bounded(find_anyhow(1, &db)).await.unwrap_err();
    assert!(
        matches!(alone.downcast_ref::<DbError>(), Some(DbError::Io(_))),
        "alone, the original anyhow error: {alone:?}"
    );
}

/// A foreign error type that cannot implement `From<stampede::Error>`: `map_error` says
/// how stampede's failures become one.
fn io_error(error: stampede::Error) -> std::io::Error {
    std::io::Error::other(error)
}

#[cached(fresh = "60s", map_error = io_error)]
async fn read_config(id: u64) -> std::io::Result<String> {
    match id {
        0 => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file",
        )),
        id => Ok(format!("config-{id}")),
    }
}

#[tokio::test]
async fn io_errors_reach_detached_callers_through_map_error() {
    let error = bounded(read_config(0)).await.unwrap_err();
    let shared = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<stampede::Error>())
        .expect("the wrapped form, through map_error");
    let original = shared
        .origin_error::<std::io::Error>()
        .expect("the original");
    assert_eq!(original.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(error.to_string(), "no such file");
    assert_eq!(bounded(read_config(2)).await.unwrap(), "config-2");
}

/// Errors that are `Clone` are cloned, as before: every caller gets the error itself.
#[derive(Debug, Clone, PartialEq)]
pub enum CloneError {
    Down,
    Cache(stampede::Error),
}

impl From<stampede::Error> for CloneError {
    fn from(error: stampede::Error) -> Self {
        CloneError::Cache(error)
    }
}

static CLONE_CALLS: AtomicUsize = AtomicUsize::new(0);

#[cached(fresh = "60s")]
async fn clone_down(id: u64) -> Result<u64, CloneError> {
    CLONE_CALLS.fetch_add(1, Ordering::SeqCst);
    while CLONE_DOWN.stats().coalesced < (CALLERS - 1) as u64 {
        tokio::task::yield_now().await;
    }
    let _ = id;
    Err(CloneError::Down)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_errors_reach_every_caller_as_themselves() {
    let answers = bounded(join_all((0..CALLERS).map(|_| clone_down(3)))).await;
    assert_eq!(CLONE_CALLS.load(Ordering::SeqCst), 1);
    assert!(answers.iter().all(|a| a == &Err(CloneError::Down)));
}
