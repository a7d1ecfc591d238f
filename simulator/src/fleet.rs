//! The fleet of one run: its replicas (each a `Runtime` of its own with the shape's
//! cache), the database behind them, and the origin that reads it.
use crate::history::{Event, History, Value};
use crate::shape::{Kind, Shape};
use stampede_runtime::{Backend, Cache, Clock, Consistency, Error, Policy, Runtime};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// The cache's error: the origin's, or stampede's own.
#[derive(Debug, Clone)]
pub enum SimError {
    Origin,
    Cache(Error),
}

impl From<Error> for SimError {
    fn from(error: Error) -> Self {
        SimError::Cache(error)
    }
}

/// The simulated clock, in microseconds since the run began.
#[derive(Clone, Copy)]
pub struct Epoch(pub Instant);

impl Epoch {
    pub fn now(self) -> u64 {
        Instant::now().duration_since(self.0).as_micros() as u64
    }
}

/// The rows every origin call reads: a version per key, raised by each write.
#[derive(Clone, Default)]
pub struct Database(Arc<Mutex<BTreeMap<u64, u64>>>);

impl Database {
    pub fn read(&self, key: u64) -> u64 {
        *self.rows().entry(key).or_insert(1)
    }

    /// Writes the row: its new version.
    pub fn write(&self, key: u64) -> u64 {
        let mut rows = self.rows();
        let version = rows.entry(key).or_insert(1);
        *version += 1;
        *version
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What every replica's origin shares: the database, the run's random draws, the
/// history, the clock.
#[derive(Clone)]
pub struct Origin {
    pub database: Database,
    pub rng: Arc<Mutex<fastrand::Rng>>,
    pub history: History,
    pub epoch: Epoch,
    pub shape: Arc<Shape>,
    /// Batch calls so far, to number them.
    pub batches: Arc<std::sync::atomic::AtomicU64>,
}

impl Origin {
    /// One origin call of `replica` for `key`: reads the row at once, answers after the
    /// shape's latency (or fails, as often as the shape says).
    pub async fn call(self, replica: usize, key: u64) -> Result<Option<Value>, SimError> {
        let mut read = self.read(replica, &[key], 0).await?;
        Ok(read.remove(&key))
    }

    /// One origin call of `replica` for `keys` together (a batch load's).
    pub async fn batch(
        self,
        replica: usize,
        keys: Vec<u64>,
    ) -> Result<HashMap<u64, Value>, SimError> {
        let batch = 1 + self
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.read(replica, &keys, batch).await
    }

    async fn read(
        &self,
        replica: usize,
        keys: &[u64],
        batch: u64,
    ) -> Result<HashMap<u64, Value>, SimError> {
        let start = self.epoch.now();
        let versions: Vec<u64> = keys.iter().map(|&key| self.database.read(key)).collect();
        let (latency, failed) = {
            let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
            let (low, high) = self.shape.origin;
            let span = (high - low).as_micros() as u64;
            let latency = low + Duration::from_micros(rng.u64(0..=span));
            (latency, rng.f64() < self.shape.origin_failures)
        };
        // Recorded however the call ends: an abandoned one (`load_timeout`) when its
        // future is dropped.
        let call = Call {
            origin: self,
            replica,
            keys,
            versions: &versions,
            start,
            batch,
            done: false,
        };
        tokio::time::sleep(latency).await;
        call.answered(failed);
        match failed {
            true => Err(SimError::Origin),
            false => Ok(keys
                .iter()
                .zip(versions)
                .map(|(&key, version)| (key, (key, version, start)))
                .collect()),
        }
    }
}

/// One replica: its runtime and the fleet's cache on it.
#[derive(Clone)]
pub struct Replica {
    pub index: usize,
    pub label: String,
    pub runtime: Runtime,
    /// Values are `Option`s, so batch loads work on it too (the origin always finds one).
    pub cache: Cache<u64, Option<Value>, SimError>,
}

/// How long a call to the shared store may take before it counts as failed.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);
/// The heartbeat's period (the store's default).
pub const HEARTBEAT: Duration = Duration::from_secs(1);

impl Replica {
    /// Replica `index` of the fleet, as `label` in world `world`.
    pub fn start(index: usize, label: String, world: &str, shape: &Shape) -> Self {
        let url = format!("model://{world}/{label}");
        let backend = match shape.kind {
            Kind::Memory => Backend::Memory,
            Kind::Redis => Backend::redis(url),
            Kind::Tiered => Backend::tiered(url),
        };
        let mut builder = Runtime::builder().backend(backend).clock(Clock::tokio());
        if let Some(limit) = shape.admission {
            builder = builder.admission("db", limit, Duration::from_secs(1));
            if shape.fleet_admission {
                builder = builder.admission_fleet_wide("db", None);
            }
        }
        if let Some(lease) = shape.hearing_lease {
            let lease = format!("{}ms", lease.as_millis());
            builder = (builder.backend_setting("hearing_lease", &lease))
                .expect("a hearing lease the settings accept");
        }
        let runtime = builder.build().expect("a simulated replica's runtime");
        let mut policy = Policy::builder("sim")
            .fresh(shape.fresh)
            .stale(shape.stale)
            .coalesce(shape.coalesce)
            .lease(shape.lease);
        if let Some(bound) = shape.stale_if_error {
            policy = policy.stale_if_error(bound);
        }
        if let Some(beta) = shape.xfetch {
            policy = policy.xfetch(beta);
        }
        if shape.admission.is_some() {
            policy = policy.admission("db");
        }
        if let Some(timeout) = shape.timeout {
            policy = policy.timeout(timeout);
        }
        if let Some(limit) = shape.load_timeout {
            policy = policy.load_timeout(limit);
        }
        if let Some(capacity) = shape.capacity {
            policy = policy.capacity(capacity);
        }
        if shape.acknowledged {
            policy = policy.consistency(Consistency::Acknowledged);
        }
        let policy = policy.build().expect("a simulated cache's policy");
        let mut cache = Cache::builder(policy).runtime(&runtime);
        if shape.tags {
            cache = cache.tags(|key: &u64, _: &Option<Value>| [group(*key)]);
        }
        if shape.versions {
            cache = cache.source_version(|value: &Option<Value>| value.map_or(0, |v| v.1));
        }
        Replica {
            index,
            label,
            runtime,
            cache: cache.build(),
        }
    }
}

/// The tag of `key`'s entries.
pub fn group(key: u64) -> String {
    format!("group:{}", key % 2)
}

/// One origin call on its way, recorded when it ends or is dropped.
struct Call<'a> {
    origin: &'a Origin,
    replica: usize,
    keys: &'a [u64],
    versions: &'a [u64],
    start: u64,
    batch: u64,
    done: bool,
}

impl Call<'_> {
    /// The call answered (`failed` or not).
    fn answered(mut self, failed: bool) {
        self.end(failed, false);
    }

    fn end(&mut self, failed: bool, abandoned: bool) {
        self.done = true;
        let end = self.origin.epoch.now();
        for (&key, &version) in self.keys.iter().zip(self.versions) {
            self.origin.history.record(Event::Origin {
                replica: self.replica,
                key,
                start: self.start,
                end,
                version,
                failed,
                abandoned,
                batch: self.batch,
            });
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.end(true, true);
        }
    }
}
