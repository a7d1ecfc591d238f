//! Per-function settings: how long a value is fresh, how long it may be served stale, and
//! how loads of it are guarded.
use crate::cache_if::CacheIf;
use crate::negative::CacheErrors;
use crate::xfetch::XFetch;
use stampede_settings as settings;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How one cache treats its values. Built with [`Policy::builder`].
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::Policy;
/// let policy = Policy::builder("user-profile")
///     .fresh(Duration::from_secs(60))
///     .stale(Duration::from_secs(30))
///     .xfetch(1.0)
///     .build()
///     .unwrap();
/// assert_eq!(policy.stale(), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone)]
pub struct Policy {
    name: Arc<str>,
    fresh: Duration,
    stale: Duration,
    stale_if_error: Option<Duration>,
    fail_safe_throttle: Duration,
    jitter: f64,
    xfetch_beta: Option<f64>,
    timeout: Option<Duration>,
    load_timeout: Option<Duration>,
    coalesce: bool,
    capacity: u64,
    hot_keys: usize,
    admission: Option<Arc<str>>,
    priority: Priority,
    consistency: Consistency,
    lease: Option<Duration>,
    fleet_lease: bool,
    version: u32,
    enabled: bool,
    cache_if: Option<CacheIf>,
    cache_errors: Option<CacheErrors>,
    max_batch: usize,
    batch_window: Duration,
}

/// Defaults: no stale window, coalescing on, no jitter, no XFetch, no deadline,
/// 10,000 entries, fail-safe retries throttled to one per 5 s, a 5 s fleet lease, key
/// schema version 0, caching enabled.
impl Policy {
    /// The fleet lease unless one is set: long enough for most recomputes (a load that
    /// outlives it lets one waiting replica load too, and the older of the two values is
    /// refused by the fence), short enough that a crashed loader delays its key briefly.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(5);
    /// The most keys one origin call of a batch load asks for, unless set.
    pub const DEFAULT_MAX_BATCH: usize = 100;
    /// How long a batch load gathers keys that are not yet ready to be asked for (say,
    /// a shared-store read still under way), unless set.
    pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(1);

    /// Starts a policy for the cache `name`; `fresh` must be set before [`PolicyBuilder::build`].
    pub fn builder(name: impl Into<Arc<str>>) -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy {
                name: name.into(),
                fresh: Duration::ZERO,
                stale: Duration::ZERO,
                stale_if_error: None,
                fail_safe_throttle: Duration::from_secs(5),
                jitter: 0.0,
                xfetch_beta: None,
                timeout: None,
                load_timeout: None,
                coalesce: true,
                capacity: 10_000,
                hot_keys: crate::hot_keys::DEFAULT_HOT_KEYS,
                admission: None,
                priority: Priority::Normal,
                consistency: Consistency::Eventual,
                lease: None,
                fleet_lease: true,
                version: 0,
                enabled: true,
                cache_if: None,
                cache_errors: None,
                max_batch: Self::DEFAULT_MAX_BATCH,
                batch_window: Self::DEFAULT_BATCH_WINDOW,
            },
        }
    }

    /// The cache's stable name (stats, logs, and later shared-store keys).
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }
    /// How long a value is served without any refresh.
    pub fn fresh(&self) -> Duration {
        self.fresh
    }
    /// How long after `fresh` a value is still served while one refresh runs.
    pub fn stale(&self) -> Duration {
        self.stale
    }
    /// How long after `fresh` the last value may stand in for a failing origin.
    pub fn stale_if_error(&self) -> Option<Duration> {
        self.stale_if_error
    }
    /// While the origin fails, how long a served fallback counts as fresh before the
    /// origin is tried again (FusionCache's fail-safe throttle).
    pub fn fail_safe_throttle(&self) -> Duration {
        self.fail_safe_throttle
    }
    /// ± fraction applied to `fresh` on every write.
    pub fn jitter(&self) -> f64 {
        self.jitter
    }
    /// XFetch's β, when early refresh is on.
    pub fn xfetch_beta(&self) -> Option<f64> {
        self.xfetch_beta
    }
    /// Per-caller deadline on a miss.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    /// The deadline of the origin call itself, after which the load is abandoned.
    pub fn load_timeout(&self) -> Option<Duration> {
        self.load_timeout
    }
    /// Whether concurrent misses of one key share one origin call.
    pub fn coalesce(&self) -> bool {
        self.coalesce
    }
    /// Maximum number of entries held in memory.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// How many of its costliest keys the cache keeps count of ([`Cache::hot_keys`]).
    ///
    /// [`Cache::hot_keys`]: crate::Cache::hot_keys
    pub fn hot_keys(&self) -> usize {
        self.hot_keys
    }
    /// Name of the origin semaphore (configured by the runtime).
    pub fn admission(&self) -> Option<&Arc<str>> {
        self.admission.as_ref()
    }

    /// How much this cache's origin calls matter when its admission's permits are short.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// What the cache's invalidations and inserts wait for (see [`Consistency`]).
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }
    /// How long a replica's claim to load a key holds on a shared store, if it neither
    /// publishes nor gives it back (a crashed or frozen replica): the longest the other
    /// replicas wait for it before one of them loads instead. Default
    /// [`DEFAULT_LEASE`](Policy::DEFAULT_LEASE); set it above the slowest recompute.
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(Self::DEFAULT_LEASE)
    }
    /// Whether a miss on a shared store takes the key's fleet lease (default `true`).
    pub fn fleet_lease(&self) -> bool {
        self.fleet_lease
    }
    /// Key schema version.
    pub fn version(&self) -> u32 {
        self.version
    }
    /// Whether the cache caches at all; when off, every call goes straight to the origin.
    pub fn enabled(&self) -> bool {
        self.enabled
    }
    /// The most keys one origin call of [`Cache::load_many`](crate::Cache::load_many) asks
    /// for; more are split into calls of at most this many.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }
    /// How long [`Cache::load_many`](crate::Cache::load_many) gathers the keys that will
    /// need the origin before it asks for those it has.
    pub fn batch_window(&self) -> Duration {
        self.batch_window
    }

    /// Whether a loaded value is stored (see [`PolicyBuilder::cache_if`]); a value that is
    /// not is still the answer of its load.
    pub(crate) fn caches<V: 'static>(&self, value: &V) -> bool {
        self.cache_if.as_ref().is_none_or(|keep| keep.keeps(value))
    }

    /// How long a chosen error is kept and served (see [`PolicyBuilder::cache_errors`]).
    pub fn error_ttl(&self) -> Option<Duration> {
        self.cache_errors.as_ref().map(CacheErrors::ttl)
    }

    /// Whether a load's error is kept for [`Policy::error_ttl`].
    pub(crate) fn keeps_error<E: 'static>(&self, error: &E) -> bool {
        self.cache_errors
            .as_ref()
            .is_some_and(|keep| keep.keeps(error))
    }

    /// A builder holding these settings, for changing some of them (runtime overrides).
    pub(crate) fn into_builder(self) -> PolicyBuilder {
        PolicyBuilder { policy: self }
    }

    /// The policy less the settings that answer callers with an error (deadline,
    /// admission, fail-safe), for functions that have no error to answer with.
    pub(crate) fn without_error_path(mut self) -> Policy {
        self.timeout = None;
        self.admission = None;
        self.stale_if_error = None;
        self
    }

    /// Whether any setting needs an error path.
    pub(crate) fn has_error_path(&self) -> bool {
        self.timeout.is_some() || self.admission.is_some() || self.stale_if_error.is_some()
    }
}

/// Builds a [`Policy`]; [`build`](PolicyBuilder::build) checks every setting.
#[derive(Debug, Clone)]
#[must_use]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// Required, non-zero.
    pub fn fresh(mut self, fresh: Duration) -> Self {
        self.policy.fresh = fresh;
        self
    }
    /// Serve-stale window after `fresh` (default zero).
    pub fn stale(mut self, stale: Duration) -> Self {
        self.policy.stale = stale;
        self
    }
    /// Serve the last value when the origin fails, up to this long after `fresh`.
    pub fn stale_if_error(mut self, bound: Duration) -> Self {
        self.policy.stale_if_error = Some(bound);
        self
    }
    /// Minimum time between origin retries while serving a fail-safe value (default 5 s).
    pub fn fail_safe_throttle(mut self, throttle: Duration) -> Self {
        self.policy.fail_safe_throttle = throttle;
        self
    }
    /// ± fraction of `fresh` drawn per write, in `0.0..=0.5`.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.policy.jitter = fraction;
        self
    }
    /// XFetch early refresh (default off): β itself (above zero; 1.0 is the usual choice,
    /// larger refreshes earlier), `true` for β = 1.0, or `false` or `0.0` to turn it off
    /// (see [`XFetch`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::Policy;
    /// let policy = || Policy::builder("prices").fresh(Duration::from_secs(60));
    /// assert_eq!(policy().xfetch(2.0).build().unwrap().xfetch_beta(), Some(2.0));
    /// assert_eq!(policy().xfetch(true).build().unwrap().xfetch_beta(), Some(1.0));
    /// assert_eq!(policy().xfetch(2.0).xfetch(0.0).build().unwrap().xfetch_beta(), None);
    /// ```
    pub fn xfetch(mut self, xfetch: impl Into<XFetch>) -> Self {
        self.policy.xfetch_beta = match xfetch.into() {
            XFetch::Off => None,
            XFetch::Beta(beta) => Some(beta),
        };
        self
    }
    /// Per-caller deadline on a miss (non-zero).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.policy.timeout = Some(timeout);
        self
    }
    /// A deadline for the origin call itself (non-zero): past it the load is abandoned
    /// (the origin's future is dropped), its shared-store lease given back and its
    /// admission permit returned, and its callers get the stale or fail-safe value where
    /// the policy allows one, else [`Error::LoadTimeout`](crate::Error::LoadTimeout).
    /// It bounds every load: a miss's, a stale-window or XFetch refresh, a forced
    /// refresh. Set it below the callers' own budgets (`timeout`), so that a hung origin
    /// holds no lease or permit for longer than a caller would wait. Kept only inside a
    /// Tokio runtime with its time driver.
    pub fn load_timeout(mut self, load_timeout: Duration) -> Self {
        self.policy.load_timeout = Some(load_timeout);
        self
    }
    /// Whether concurrent misses share one origin call (default true).
    pub fn coalesce(mut self, coalesce: bool) -> Self {
        self.policy.coalesce = coalesce;
        self
    }
    /// Maximum number of in-memory entries (non-zero).
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.policy.capacity = capacity;
        self
    }
    /// How many of its costliest keys (most misses and origin calls) the cache keeps
    /// count of, for [`Cache::hot_keys`] (default [`DEFAULT_HOT_KEYS`], at most 1,024; 0
    /// keeps none and costs a miss nothing).
    ///
    /// [`Cache::hot_keys`]: crate::Cache::hot_keys
    /// [`DEFAULT_HOT_KEYS`]: crate::DEFAULT_HOT_KEYS
    pub fn hot_keys(mut self, keys: usize) -> Self {
        self.policy.hot_keys = keys;
        self
    }
    /// Stores only the loaded values `keep` accepts (default: every value), say
    /// `Option::is_some` to not cache `None`. A value it refuses is the answer of its load,
    /// for the caller and every waiter, and is not stored: the next call loads again (a
    /// refresh that it refuses leaves the old value in place). `V` is the cache's value
    /// type; values of another type are stored.
    pub fn cache_if<V: 'static>(mut self, keep: fn(&V) -> bool) -> Self {
        self.policy.cache_if = Some(CacheIf::new(keep));
        self
    }
    /// Negative caching: an error `keep` accepts (say, a row that is not there) is kept
    /// for `ttl` and served to the key's callers meanwhile, so a hot id that is not found
    /// costs one origin call per `ttl` instead of one per burst. Other errors are never
    /// kept. Kept errors stay in this process's memory whatever the backend (an error
    /// type need not be serializable); an invalidation of the key, or a value stored for
    /// it, drops its error. `E` is the cache's error type; errors of another type are not
    /// kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::Policy;
    /// let policy = Policy::builder("user")
    ///     .fresh(Duration::from_secs(60))
    ///     .cache_errors(Duration::from_secs(5), |error: &String| error == "not found")
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(policy.error_ttl(), Some(Duration::from_secs(5)));
    /// ```
    pub fn cache_errors<E: 'static>(mut self, ttl: Duration, keep: fn(&E) -> bool) -> Self {
        self.policy.cache_errors = Some(CacheErrors::new(ttl, keep));
        self
    }
    /// Names the origin semaphore this cache's loads go through.
    pub fn admission(mut self, name: impl Into<Arc<str>>) -> Self {
        self.policy.admission = Some(name.into());
        self
    }
    /// What this cache's invalidations and inserts wait for before they return (default
    /// [`Consistency::Eventual`]; see [`Consistency`]).
    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.policy.consistency = consistency;
        self
    }

    /// How much this cache's origin calls matter when its admission's permits are short
    /// (default [`Priority::Normal`]): a high-priority load may take the admission's
    /// reserved permits, a low-priority one is shed first (see [`Priority`]).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.policy.priority = priority;
        self
    }
    /// Fleet lease TTL on shared stores (non-zero; default [`Policy::DEFAULT_LEASE`]):
    /// how long other replicas wait for this replica's load of a key before one of them
    /// loads it instead. Set it above the slowest recompute.
    pub fn lease(mut self, ttl: Duration) -> Self {
        self.policy.lease = Some(ttl);
        self
    }
    /// `false`: misses on a shared store take no fleet lease, so each replica that misses
    /// a key loads it once (callers within one replica still share that load). For
    /// origins so cheap that waiting for another replica costs more than loading; also
    /// how the herd shows what the lease saves. Fences and version marks still apply.
    pub fn fleet_lease(mut self, take: bool) -> Self {
        self.policy.fleet_lease = take;
        self
    }
    /// Key schema version; bump it when the key's meaning changes.
    pub fn version(mut self, version: u32) -> Self {
        self.policy.version = version;
        self
    }
    /// The most keys one origin call of a batch load asks for (default
    /// [`Policy::DEFAULT_MAX_BATCH`], `1..=100_000`).
    pub fn max_batch(mut self, keys: usize) -> Self {
        self.policy.max_batch = keys;
        self
    }
    /// How long a batch load gathers keys whose loads are not yet ready to ask the origin
    /// (default [`Policy::DEFAULT_BATCH_WINDOW`], above zero, at most 1 s). A batch whose
    /// every key is ready asks at once, without waiting it out.
    pub fn batch_window(mut self, window: Duration) -> Self {
        self.policy.batch_window = window;
        self
    }
    /// Whether to cache at all (default true). Off, every call runs the origin directly:
    /// no store, no coalescing, no deadline, no admission; each call counts as an origin
    /// call. Operators switch it per function in the runtime configuration.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.policy.enabled = enabled;
        self
    }

    /// Checks the settings and returns the policy. The ranges are the ones the attribute,
    /// the file and the environment check too; every deadline the policy derives
    /// (`fresh × (1 + jitter)` plus the longer of `stale` and `stale_if_error`) must stay
    /// within a century.
    ///
    /// ```
    /// use stampede_runtime::Policy;
    /// let err = Policy::builder("x").build().unwrap_err();
    /// assert_eq!(err.to_string(), "policy `x`: fresh must be greater than zero");
    /// ```
    pub fn build(self) -> Result<Policy, PolicyError> {
        let mut p = self.policy;
        if p.name.is_empty() {
            return Err(PolicyError::new("", "the name must not be empty"));
        }
        p.check().map_err(|what| PolicyError::new(&p.name, &what))?;
        if let Some(beta) = p.xfetch_beta {
            // A β of 0 is off: the hit path then skips XFetch's draw altogether.
            p.xfetch_beta = settings::xfetch_beta("xfetch_beta", beta)
                .map_err(|what| PolicyError::new(&p.name, &what))?;
        }
        Ok(p)
    }
}

impl Policy {
    fn check(&self) -> Result<(), String> {
        settings::positive("fresh", self.fresh)?;
        settings::within_horizon("stale", self.stale)?;
        if let Some(bound) = self.stale_if_error {
            settings::within_horizon("stale_if_error", bound)?;
        }
        settings::positive("fail_safe_throttle", self.fail_safe_throttle)?;
        settings::jitter("jitter", self.jitter)?;
        if let Some(timeout) = self.timeout {
            settings::positive("timeout", timeout)?;
        }
        if let Some(load_timeout) = self.load_timeout {
            settings::positive("load_timeout", load_timeout)?;
        }
        if let Some(lease) = self.lease {
            settings::positive("lease", lease)?;
        }
        settings::capacity("capacity", self.capacity)?;
        settings::hot_keys("hot_keys", self.hot_keys as u64)?;
        settings::max_batch("max_batch", self.max_batch as u64)?;
        settings::batch_window("batch_window", self.batch_window)?;
        if let Some(ttl) = self.error_ttl() {
            settings::positive("cache_errors", ttl)?;
            settings::within_horizon("cache_errors", ttl)?;
        }
        if self.admission.as_deref() == Some("") {
            return Err("the admission name must not be empty".to_owned());
        }
        settings::horizon(
            self.fresh,
            self.jitter,
            self.stale,
            self.stale_if_error.unwrap_or_default(),
        )
    }
}

/// A setting of a [`PolicyBuilder`] out of range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    message: String,
}

impl PolicyError {
    fn new(name: &str, what: &str) -> Self {
        PolicyError {
            message: format!("policy `{name}`: {what}"),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// How much a cache's origin calls matter when its admission's permits are short
/// ([`PolicyBuilder::priority`], `priority = low` on the attribute, `priority = "low"` in
/// a function's overrides). Every load of the cache has its priority.
///
/// A `High` load may take the admission's reserved permits (`reserved_high`) as well as
/// the shared ones; a `Low` load is shed at once, with
/// [`Error::Overloaded`](crate::Error::Overloaded) (or the stale or fail-safe value where
/// one may stand in), when `low_queue` loads or more are queued already. Without either
/// setting on the admission, every priority queues alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Shed first: a background report, a prefetch.
    Low,
    /// The default.
    #[default]
    Normal,
    /// May take the reserved permits: the requests a user waits for.
    High,
}

/// What a cache's writes (`invalidate`, `invalidate_at`, `insert`) wait for before they
/// return, on the tiered backend ([`PolicyBuilder::consistency`], `consistency =
/// "acknowledged"` in a function's overrides; one call: [`acknowledged`](crate::acknowledged)).
///
/// With `Eventual` (the default) a write returns once Redis took it; another tiered
/// replica drops its memory copy when the notice reaches it, usually within a millisecond.
/// With `Acknowledged` it returns once every replica that heard the notice applied it and
/// said so, or once the hearing lease (`hearing_lease`, 500 ms by default) ran out, after
/// which a replica that did not apply it serves no copy: a call that begins anywhere in
/// the fleet after the write returned reads what the write left. The memory and redis
/// backends keep no copies that outlive a write elsewhere, and pay nothing for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// Return once the shared store took the write.
    #[default]
    Eventual,
    /// Return once no replica can serve what the write retired.
    Acknowledged,
}

#[cfg(test)]
mod tests;
