//! The process's [`Runtime`]: the checked configuration a cache binds to (its backend,
//! admission semaphores and per-function overrides), the connection to the shared store,
//! and the caches built with it.
//!
//! A runtime is built in code ([`Runtime::builder`]), from a TOML file
//! ([`RuntimeBuilder::file`], or the one `STAMPEDE_CONFIG` names) and from `STAMPEDE_*`
//! variables ([`RuntimeBuilder::env`]), in that order, later ones winning; `config` holds
//! and checks those settings. One runtime is the process's ([`RuntimeBuilder::install`]);
//! a cache built without an explicit runtime uses it, and when nothing was installed the
//! first such cache reads the environment.
use crate::admission::{Admission, Gate};
use crate::clock::Clock;
use crate::config::{self, Backend, Config, ConfigError, Layers, Overrides};
use crate::error::Error;
use crate::policy::Policy;
use crate::shared::replica::Replica;
use crate::shared::store::{BreakerState, StoreError};
use crate::stats::{BackendStats, FleetAdmissionStats, Observed, Stats};
use crate::tags::TagBook;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// Builds a [`Runtime`]: code first, then a file, then the environment, each overriding
/// what came before.
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::Runtime;
/// let runtime = Runtime::builder()
///     .admission("db", 20, Duration::from_millis(500))
///     .build()
///     .unwrap();
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RuntimeBuilder {
    layers: Layers,
    clock: Option<Clock>,
    #[cfg(feature = "metrics")]
    metrics_interval: Option<Duration>,
}

impl RuntimeBuilder {
    /// Where values are stored (default [`Backend::Memory`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.layers.set_backend(&backend);
        self
    }

    /// Sets one setting of the shared store by its key in the file's `[backend]` table,
    /// from its text as the `STAMPEDE_REDIS_<KEY>` variable would give it: the one way
    /// to set in code what has no method here (credentials, TLS files, timeouts). A key
    /// that is not a backend setting, or text it cannot read, is refused here; its
    /// range and what it names (a file, a certificate) are checked by
    /// [`build`](Self::build).
    ///
    /// ```
    /// use stampede_runtime::{Backend, Runtime};
    /// let runtime = Runtime::builder()
    ///     .backend(Backend::redis("rediss://cache.internal:6380/0"))
    ///     .backend_setting("username", "orders")?
    ///     .backend_setting("response_timeout", "100ms")?
    ///     .build()?;
    /// # Ok::<(), stampede_runtime::ConfigError>(())
    /// ```
    pub fn backend_setting(mut self, key: &str, value: &str) -> Result<Self, ConfigError> {
        self.layers.set_backend_key(key, value)?;
        Ok(self)
    }

    /// Defines the admission semaphore `name`: at most `limit` origin calls at once across
    /// the caches naming it; a load that queues longer than `queue_timeout` is shed.
    pub fn admission(
        mut self,
        name: impl Into<Arc<str>>,
        limit: usize,
        queue_timeout: Duration,
    ) -> Self {
        self.layers.set_admission(name.into(), limit, queue_timeout);
        self
    }

    /// How the admission semaphore `name` shares its permits between priorities (see
    /// [`Priority`](crate::Priority)): `reserved_high` of its permits only high-priority
    /// loads take (below its limit), and a low-priority load that finds `low_queue` loads
    /// or more queued is shed at once (`None` leaves `low_queue` as the file or the
    /// environment sets it; unset, low-priority loads queue like the others). The file's
    /// `reserved_high` and `low_queue` in `[admission.<name>]`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::Runtime;
    /// let runtime = Runtime::builder()
    ///     .admission("db", 20, Duration::from_millis(500))
    ///     .admission_shares("db", 4, Some(10))
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn admission_shares(
        mut self,
        name: impl Into<Arc<str>>,
        reserved_high: usize,
        low_queue: Option<usize>,
    ) -> Self {
        self.layers
            .set_admission_shares(name.into(), reserved_high, low_queue);
        self
    }

    /// The most permits of the admission semaphore `name` that the loads of one key group
    /// hold at once (a tenant's, say: see
    /// [`CacheBuilder::admission_group`](crate::CacheBuilder::admission_group)), so one
    /// group's flush cannot take every permit. The file's `per_group` in
    /// `[admission.<name>]`.
    pub fn admission_per_group(mut self, name: impl Into<Arc<str>>, per_group: usize) -> Self {
        self.layers.set_admission_per_group(name.into(), per_group);
        self
    }

    /// Makes the admission semaphore `name` bound the whole fleet's origin calls, not each
    /// replica's: on a shared backend its permits are held in the shared store, and a
    /// replica that cannot reach the store takes at most `local_limit` of its own (`None`
    /// leaves it as the file or the environment sets it; unset, a quarter of the limit,
    /// rounded up). The file's `scope = "fleet"` and `local_limit` in
    /// `[admission.<name>]`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::Runtime;
    /// let runtime = Runtime::builder()
    ///     .admission("db", 40, Duration::from_secs(2))
    ///     .admission_fleet_wide("db", Some(5))
    ///     .build()
    ///     .unwrap();
    /// ```
    pub fn admission_fleet_wide(
        mut self,
        name: impl Into<Arc<str>>,
        local_limit: Option<usize>,
    ) -> Self {
        self.layers
            .set_admission_fleet_wide(name.into(), local_limit);
        self
    }

    /// Overrides settings of the cache named `name` (merged over earlier overrides of it).
    pub fn function(mut self, name: impl Into<Arc<str>>, overrides: Overrides) -> Self {
        self.layers.set_function(name.into(), overrides);
        self
    }

    /// The clock every cache built with this runtime reads (default [`Clock::system`]),
    /// `#[cached]` functions included when the runtime is installed. [`Clock::tokio`]
    /// lets tests drive freshness with Tokio's paused clock.
    ///
    /// ```
    /// use stampede_runtime::{Clock, Runtime};
    /// let runtime = Runtime::builder().clock(Clock::tokio()).build().unwrap();
    /// ```
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// How often the runtime exports its counters to the installed `metrics` recorder on
    /// its own, from the first cache built with it (default 5 s; `Duration::ZERO` never:
    /// call [`Runtime::export_metrics`] yourself). Feature `metrics`.
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_interval(mut self, interval: Duration) -> Self {
        self.metrics_interval = Some(interval);
        self
    }

    /// Reads the TOML file at `path` over what is set so far. The file must parse and
    /// every key must be known; ranges are checked by [`build`](Self::build), and every
    /// error names the file, the line and the dotted key.
    pub fn file(mut self, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        self.layers.read_file(path.as_ref(), None)?;
        Ok(self)
    }

    /// Reads `STAMPEDE_CONFIG`'s file, if set, then the `STAMPEDE_*` overrides (the
    /// configuration guide, `docs/configuration.md`, lists them). What a cache does on first use when nothing was
    /// installed.
    pub fn env(self) -> Result<Self, ConfigError> {
        self.read_env(std::env::vars_os())
    }

    fn read_env(
        mut self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Self, ConfigError> {
        self.layers.read_env(vars)?;
        Ok(self)
    }

    /// Checks every setting (in range, every admission a function names defined, no two
    /// function names that the environment cannot tell apart) and builds the runtime.
    pub fn build(self) -> Result<Runtime, ConfigError> {
        let config = self.layers.check(Replica::check)?;
        let admissions = (config.admissions.iter())
            .map(|(name, admission)| {
                let semaphore = Admission::with_shares(
                    name.clone(),
                    admission.limit,
                    admission.queue_timeout,
                    admission.shares,
                )
                .fleet_wide(admission.fleet);
                (name.clone(), Arc::new(semaphore))
            })
            .collect();
        let tags = TagBook::new(config.backend != Backend::Memory);
        Ok(Runtime {
            state: Arc::new(RuntimeState {
                tags,
                config,
                replica: OnceLock::new(),
                admissions,
                clock: self.clock.unwrap_or_default(),
                claimed: Mutex::new(BTreeMap::new()),
                caches: Mutex::new(Vec::new()),
                #[cfg(feature = "metrics")]
                metrics_interval: self.metrics_interval.unwrap_or(METRICS_INTERVAL),
                #[cfg(feature = "metrics")]
                exporting: std::sync::Once::new(),
            }),
        })
    }

    /// Builds the runtime and makes it the process's: every cache built afterwards without
    /// an explicit runtime uses it. Fails if one was installed already, or if a cache was
    /// built before (it took the environment's settings then); install at startup.
    pub fn install(self) -> Result<Runtime, ConfigError> {
        let runtime = self.build()?;
        let mut ours = false;
        let global = GLOBAL.get_or_init(|| {
            ours = true;
            Global {
                runtime: Ok(runtime.clone()),
                installed: true,
            }
        });
        if ours {
            return Ok(runtime);
        }
        let message = if global.installed {
            "a runtime was already installed in this process; install it once, at startup"
        } else {
            "a cache was built before this install and took its settings from the environment; install the runtime at startup, before the first cache is built or cached function called"
        };
        Err(ConfigError::in_process(message))
    }
}

/// Backend, admission semaphores and per-function overrides, shared by the caches built
/// with it. Cheap to clone.
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{Cache, Policy, Runtime};
///
/// let runtime = Runtime::builder()
///     .admission("db", 4, Duration::from_millis(500))
///     .build()
///     .unwrap();
/// let policy = Policy::builder("user-profile")
///     .fresh(Duration::from_secs(60))
///     .admission("db")
///     .build()
///     .unwrap();
/// let profiles: Cache<u64, String> = Cache::builder(policy).runtime(&runtime).build();
/// ```
#[derive(Clone)]
pub struct Runtime {
    state: Arc<RuntimeState>,
}

struct RuntimeState {
    config: Config,
    /// The versions of the tags of every cache built on this runtime.
    tags: Arc<TagBook>,
    /// The shared store, connected on first use.
    replica: OnceLock<Result<Arc<Replica>, StoreError>>,
    admissions: HashMap<Arc<str>, Arc<Admission>>,
    clock: Clock,
    /// The names caches were built with, by their environment form.
    claimed: Mutex<BTreeMap<String, Arc<str>>>,
    /// The caches built with this runtime, for [`Runtime::stats`] and metrics export.
    caches: Mutex<Vec<Weak<dyn Observed>>>,
    #[cfg(feature = "metrics")]
    metrics_interval: Duration,
    /// The export on an interval, started with the first cache.
    #[cfg(feature = "metrics")]
    exporting: std::sync::Once,
}

/// How often a runtime exports its counters unless told otherwise.
#[cfg(feature = "metrics")]
const METRICS_INTERVAL: Duration = Duration::from_secs(5);

/// Exports the counters of the runtime behind `state` every `interval` while it lives,
/// on the background threads (which outlive whichever Tokio runtime built the first cache).
#[cfg(feature = "metrics")]
fn export_every(state: Weak<RuntimeState>, interval: Duration) {
    crate::shared::background::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(state) = state.upgrade() else {
                return;
            };
            Runtime { state }.export_metrics();
        }
    });
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut admissions: Vec<_> = self.state.admissions.keys().collect();
        admissions.sort();
        f.debug_struct("Runtime")
            .field("backend", &self.state.config.backend)
            .field("admissions", &admissions)
            .finish_non_exhaustive()
    }
}

/// The process's runtime, once installed or read from the environment on first use.
struct Global {
    runtime: Result<Runtime, ConfigError>,
    installed: bool,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

impl Runtime {
    /// An empty builder: the memory backend, no admission semaphores, no overrides.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The runtime the environment describes (`STAMPEDE_CONFIG`, `STAMPEDE_*`), or the
    /// embedded memory backend when nothing is set.
    pub fn from_env() -> Result<Runtime, ConfigError> {
        Runtime::builder().env()?.build()
    }

    /// The process's runtime: the installed one, or on first use the one the environment
    /// describes. A bad environment is an error here, and every load of a cache built
    /// without an explicit runtime fails with [`Error::Config`] naming it; call this at
    /// startup to fail fast instead.
    pub fn global() -> Result<Runtime, ConfigError> {
        GLOBAL
            .get_or_init(|| {
                let runtime = Runtime::from_env();
                if let Err(error) = &runtime {
                    tracing::error!(target: "stampede", %error, "invalid stampede configuration; every load of a cache using it will fail");
                }
                Global {
                    runtime,
                    installed: false,
                }
            })
            .runtime
            .clone()
    }

    /// Where values are stored.
    pub fn backend(&self) -> Backend {
        self.state.config.backend.clone()
    }

    /// This replica's connection to the shared store, made on first use (inside a Tokio
    /// runtime; outside one there is none and caches stay in memory). `None` for the
    /// memory backend.
    pub(crate) fn replica(&self) -> Option<&Arc<Replica>> {
        if self.state.config.backend == Backend::Memory {
            return None;
        }
        // The store runs its connections on Tokio: connect only inside a runtime.
        tokio::runtime::Handle::try_current().ok()?;
        let replica = self.state.replica.get_or_init(|| {
            let started =
                Replica::start(&self.state.config.backend_settings, self.state.tags.clone());
            if let Err(error) = &started {
                tracing::error!(target: "stampede", %error, "the shared store cannot be used: every cache of this runtime keeps its values in this process's memory");
            }
            started
        });
        // A failure was logged once, when it happened: the build checked what can be
        // checked without connecting, so this is rare (a file removed since).
        replica.as_ref().ok()
    }

    /// The shared store's counters: `None` for the memory backend, or before the first
    /// load connected it. `degraded_now` says loads skip the store (see degraded mode
    /// in the operations guide).
    pub fn backend_stats(&self) -> Option<BackendStats> {
        let replica = self.state.replica.get()?.as_ref().ok()?;
        let stats = replica.store().stats();
        Some(BackendStats {
            hits: stats.hits,
            misses: stats.misses,
            errors: stats.errors,
            late_answers: stats.late_answers,
            orphaned_leases_released: stats.orphans_released,
            decode_failures: stats.decode_failures,
            notices_sent: stats.notices_sent,
            notices_received: stats.notices_received,
            notice_buckets: stats.notice_buckets as u64,
            subscribed: stats.subscribed,
            degraded_now: stats.breaker != BreakerState::Closed || stats.problem.is_some(),
            problem: stats.problem,
            breaker_opened: stats.breaker_opened,
            degraded: stats.degraded,
            invalidations_queued: replica.queued() as u64,
            acknowledged_writes: replica
                .acknowledged_writes
                .load(std::sync::atomic::Ordering::Relaxed),
            acknowledged_writes_waited_out: replica
                .writes_waited_out
                .load(std::sync::atomic::Ordering::Relaxed),
            hearing_lease_holds: replica.store().hearing_lease().holds(),
        })
    }

    /// This replica's id on the shared store, once a load connected it: 16 hex digits,
    /// random per process. A miss that waits for another replica's load records a
    /// `lease_wait` span whose `owner` field is the first 8 digits of that replica's id.
    pub fn replica_id(&self) -> Option<String> {
        let replica = self.state.replica.get()?.as_ref().ok()?;
        Some(replica.store().replica().to_owned())
    }

    /// The limit and queue timeout of the admission semaphore `name`, if defined.
    pub fn admission(&self, name: &str) -> Option<(usize, Duration)> {
        let admission = self.state.admissions.get(name)?;
        Some((admission.limit(), admission.queue_timeout()))
    }

    /// This replica's side of the fleet-wide admission `name`: `None` unless `name` is
    /// defined with `scope = "fleet"`.
    pub fn fleet_admission(&self, name: &str) -> Option<FleetAdmissionStats> {
        let counts = self.state.admissions.get(name)?.fleet_counts()?;
        Some(FleetAdmissionStats {
            held: counts.held as u64,
            local: counts.local as u64,
            local_total: counts.local_total,
            lapsed: counts.lapsed,
        })
    }

    /// A snapshot of every live cache built with this runtime, by cache name.
    pub fn stats(&self) -> Vec<(Arc<str>, Stats)> {
        self.observed()
            .iter()
            .map(|cache| (cache.name().clone(), cache.stats()))
            .collect()
    }

    pub(crate) fn observed(&self) -> Vec<Arc<dyn Observed>> {
        let caches = self
            .state
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        caches.iter().filter_map(Weak::upgrade).collect()
    }

    #[cfg(feature = "metrics")]
    pub(crate) fn admissions(&self) -> impl Iterator<Item = &Arc<Admission>> {
        self.state.admissions.values()
    }

    /// The clock caches built with this runtime read, unless their builder sets one.
    pub(crate) fn clock(&self) -> &Clock {
        &self.state.clock
    }

    /// Records that a cache named `name` was built; the name that first claimed the same
    /// environment form, if any.
    fn claim(&self, env_name: String, name: &Arc<str>) -> Arc<str> {
        let mut claimed = self
            .state
            .claimed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        claimed
            .entry(env_name)
            .or_insert_with(|| name.clone())
            .clone()
    }

    /// The `[functions."…"]` entries (and `STAMPEDE_FUNCTION_<NAME>_*` variables) that no
    /// cache built with this runtime has claimed so far, each logged at warn level: a
    /// name there that no cache ever claims is most likely a typo. Call it once every
    /// cache was built (after startup, or after a first call of each cached function).
    ///
    /// ```
    /// use stampede_runtime::{Overrides, Runtime};
    /// let runtime = Runtime::builder()
    ///     .function("user-proflie", Overrides::new().enabled(false))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(runtime.unclaimed_functions(), ["user-proflie"]);
    /// ```
    pub fn unclaimed_functions(&self) -> Vec<String> {
        let claimed = self
            .state
            .claimed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut unclaimed: Vec<String> = self
            .state
            .config
            .functions
            .keys()
            .filter(|name| !claimed.values().any(|c| c == *name))
            .map(|name| name.to_string())
            .collect();
        unclaimed.sort();
        let mut variables: Vec<String> = (self.state.config.env_functions.keys())
            .filter(|env_name| !claimed.contains_key(*env_name))
            .map(|env_name| format!("{}{env_name}_*", config::FUNCTION))
            .collect();
        variables.sort();
        unclaimed.extend(variables);
        for entry in &unclaimed {
            tracing::warn!(target: "stampede", function = %entry, "no cache claims these overrides; is the name misspelt?");
        }
        unclaimed
    }

    /// Remembers a cache for [`Runtime::stats`]; dropped caches are pruned here.
    pub(crate) fn register(&self, cache: Weak<dyn Observed>) {
        let mut caches = self
            .state
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        caches.retain(|c| c.strong_count() > 0);
        caches.push(cache);
        drop(caches);
        #[cfg(feature = "metrics")]
        if !self.state.metrics_interval.is_zero() {
            self.state.exporting.call_once(|| {
                export_every(Arc::downgrade(&self.state), self.state.metrics_interval);
            });
        }
    }

    /// The policy a cache runs with (its own, with this runtime's overrides for its name)
    /// and how its loads are admitted. An admission name nothing defines closes the gate:
    /// every load fails with [`Error::UnknownAdmission`], never a panic.
    pub(crate) fn bind(&self, policy: Policy) -> (Policy, Gate) {
        let name = policy.name().clone();
        let first_claim = self.claim(config::env_name(&name), &name);
        let policy = match self.state.config.policy_of(policy.clone(), &first_claim) {
            Ok(policy) => policy,
            Err(error) => {
                tracing::error!(target: "stampede", %error);
                return (policy, Gate::Closed(Error::Config { cache: name, error }));
            }
        };
        let gate = match policy.admission() {
            None => Gate::Open,
            Some(admission) => match self.state.admissions.get(admission) {
                Some(defined) => Gate::Limited(defined.clone()),
                None => {
                    let error = Error::UnknownAdmission {
                        cache: name,
                        admission: admission.clone(),
                    };
                    tracing::error!(target: "stampede", %error);
                    Gate::Closed(error)
                }
            },
        };
        (policy, gate)
    }
}

mod tagging;
pub use tagging::invalidate_tag;

#[cfg(test)]
mod tests;
