//! A price service on stampede: `GET /price/{id}` reads a slow database through a cached
//! function, `PUT /price/{id}` writes it and invalidates the cached price on every
//! replica, `/metrics` serves Prometheus text and `/health` says whether the shared store
//! is reachable.
//!
//! It runs on the embedded memory backend as it is; the environment alone moves it to
//! Redis (`STAMPEDE_BACKEND=tiered STAMPEDE_REDIS_URL=redis://127.0.0.1:6379`), where
//! every instance shares values and invalidations.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::{Deserialize, Serialize};
use stampede::cached;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A row of the `prices` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    pub id: u64,
    pub cents: u64,
    /// Raised by every write: what `invalidate_at` compares. A BIGINT column, as row
    /// versions are in Postgres: `source_version` and `invalidate_at` take an `i64`.
    pub version: i64,
}

/// The service's error. Not `Clone` (a database driver's error seldom is): callers that
/// shared a load get it back through [`AppError::origin`].
#[derive(Debug)]
pub enum AppError {
    NotFound(u64),
    Database(String),
    /// stampede's own failures (a timeout, overload), and the wrapped form of an origin
    /// error for the callers that did not run the origin themselves.
    Cache(stampede::Error),
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::NotFound(id) => write!(f, "no price {id}"),
            AppError::Database(why) => write!(f, "database: {why}"),
            AppError::Cache(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for AppError {}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

impl AppError {
    /// The error the origin returned, whichever form this caller got: a caller that
    /// waited for another caller's load gets `Cache(Origin(..))`, which holds it.
    pub fn origin(&self) -> &AppError {
        match self {
            AppError::Cache(cache) => cache.origin_error::<AppError>().unwrap_or(self),
            error => error,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match self.origin() {
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Database(_) => StatusCode::BAD_GATEWAY,
            AppError::Cache(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, self.to_string()).into_response()
    }
}

/// An in-process stand-in for a slow database (so the example needs nothing installed).
#[derive(Clone)]
pub struct Db {
    rows: Arc<Mutex<HashMap<u64, Price>>>,
    latency: Duration,
    queries: Arc<AtomicU64>,
}

impl Db {
    /// Prices 1..=1000 at `base + id` cents, each query taking `latency`.
    pub fn new(latency: Duration, base: u64) -> Self {
        let rows = (1..=1000)
            .map(|id| {
                let price = Price {
                    id,
                    cents: base + id,
                    version: 1,
                };
                (id, price)
            })
            .collect();
        Db {
            rows: Arc::new(Mutex::new(rows)),
            latency,
            queries: Arc::default(),
        }
    }

    async fn price(&self, id: u64) -> Result<Price, AppError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.latency).await;
        let rows = self.rows.lock().expect("the rows");
        rows.get(&id).cloned().ok_or(AppError::NotFound(id))
    }

    async fn set_price(&self, id: u64, cents: u64) -> Result<Price, AppError> {
        self.queries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.latency).await;
        let mut rows = self.rows.lock().expect("the rows");
        let row = rows.get_mut(&id).ok_or(AppError::NotFound(id))?;
        row.cents = cents;
        row.version += 1;
        Ok(row.clone())
    }

    /// Queries so far.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }
}

/// A price, cached: fresh for 2 s, then served stale for 2 s more while one refresh runs
/// (for the whole fleet on a shared backend), refreshed early when hot (XFetch). `clone(db)`
/// gives the origin its own handle, so refreshes run in the background.
#[cached(fresh = "2s", stale = "2s", xfetch, clone(db), source_version = |p: &Price| p.version)]
pub async fn price(id: u64, db: &Db) -> Result<Price, AppError> {
    db.price(id).await
}

#[derive(Clone)]
struct App {
    db: Db,
    metrics: Option<PrometheusHandle>,
}

/// The routes. `metrics`: the Prometheus recorder's handle, if one is installed.
pub fn app(db: Db, metrics: Option<PrometheusHandle>) -> Router {
    Router::new()
        .route("/price/{id}", get(read_price).put(write_price))
        .route("/metrics", get(metrics_text))
        .route("/health", get(health))
        .with_state(App { db, metrics })
}

async fn read_price(State(app): State<App>, Path(id): Path<u64>) -> Result<Json<Price>, AppError> {
    Ok(Json(price(id, &app.db).await?))
}

#[derive(Deserialize)]
struct NewPrice {
    cents: u64,
}

/// Writes the row, then invalidates the cached price at the row's new version: on every
/// replica, and a load that read the row before the write is not stored after it.
async fn write_price(
    State(app): State<App>,
    Path(id): Path<u64>,
    Json(new): Json<NewPrice>,
) -> Result<Json<Price>, AppError> {
    let written = app.db.set_price(id, new.cents).await?;
    if let Err(error) = PRICE.invalidate_at(&id, written.version).await {
        // Applied here and queued for the shared store: it reaches the fleet once Redis
        // answers, and this replica reads nothing from Redis for the key before that.
        eprintln!("invalidation queued: {error}");
    }
    Ok(Json(written))
}

async fn metrics_text(State(app): State<App>) -> Response {
    let Some(handle) = app.metrics else {
        return (StatusCode::NOT_FOUND, "no metrics recorder").into_response();
    };
    if let Ok(runtime) = stampede::Runtime::global() {
        runtime.export_metrics();
    }
    handle.render().into_response()
}

/// What `/health` serves. Nothing in it is a secret: the backend prints its URL with the
/// password as `***`, and `problem` names settings, never their values.
#[derive(Serialize)]
struct Health {
    /// The kind and where it connects: `tiered, redis://app:***@cache:6379/`.
    backend: String,
    /// Loads skip the shared store (unreachable, or `problem`).
    degraded: bool,
    /// Why the shared store cannot be used as configured, and the setting to change.
    problem: Option<String>,
    /// The shared store's counters (`None` on the memory backend, or before first use).
    store: Option<stampede::BackendStats>,
}

/// 200 while values are shared as configured, 503 while the shared store is unreachable
/// or misconfigured (calls are still answered, from this replica's memory and the
/// database).
async fn health() -> Response {
    let Ok(runtime) = stampede::Runtime::global() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "invalid stampede configuration",
        )
            .into_response();
    };
    let stats = runtime.backend_stats();
    let health = Health {
        backend: runtime.backend().to_string(),
        degraded: stats.as_ref().is_some_and(|stats| stats.degraded_now),
        problem: stats.as_ref().and_then(|stats| stats.problem.clone()),
        store: stats,
    };
    let status = if health.degraded {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(health)).into_response()
}
