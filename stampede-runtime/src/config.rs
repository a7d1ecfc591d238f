//! The process's [`Runtime`]: which backend stores values, the admission semaphores, and
//! per-function overrides of the settings compiled into each policy.
//!
//! A runtime is built in code ([`Runtime::builder`]), from a TOML file
//! ([`RuntimeBuilder::file`], or the one `STAMPEDE_CONFIG` names) and from `STAMPEDE_*`
//! variables ([`RuntimeBuilder::env`]), in that order, later ones winning. All three fill
//! the same serde models ([`Overrides`], the backend and admission tables), and
//! [`RuntimeBuilder::build`] checks them in one place, naming where each setting came
//! from. One runtime is the process's ([`RuntimeBuilder::install`]); a cache built without
//! an explicit runtime uses it, and when nothing was installed the first such cache reads
//! the environment.
/// Declares a table of settings: the serde model, one optional field per key (what one
/// source sets; unknown keys refused), and how sources layer over each other.
macro_rules! table {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {$(
            $(#[doc = $doc:literal])*
            $(#[serde($($serde:tt)*)])?
            $field:ident: $ty:ty,
        )*}
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {$(
            $(#[doc = $doc])*
            #[serde(default $(, $($serde)*)?)]
            pub(crate) $field: Option<$ty>,
        )*}

        impl $crate::config::Layer for $name {
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            fn set_keys(&self) -> Vec<&'static str> {
                let set = [$(self.$field.is_some()),*];
                Self::KEYS.iter().zip(set).filter_map(|(key, set)| set.then_some(*key)).collect()
            }

            fn merge(&mut self, later: &Self) {
                $(if later.$field.is_some() { self.$field.clone_from(&later.$field); })*
            }
        }
    };
}

pub(crate) mod backend;
mod env;
mod error;
mod file;
mod overrides;
mod values;

pub use backend::Backend;
pub use error::ConfigError;
pub use overrides::Overrides;

use crate::admission::{Admission, Gate};
use crate::clock::Clock;
use crate::error::Error;
use crate::policy::Policy;
use crate::remote::replica::Remote;
use crate::remote::store::{BreakerState, StoreError};
use crate::stats::{BackendStats, Observed, Stats};
use backend::{BackendLayer, BackendSettings};
use error::At;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// How long a load queues for an admission permit before it is shed, unless configured.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// A table of settings each source may set part of; later sources win key by key.
pub(crate) trait Layer: Default {
    /// Every key, as the file writes it.
    const KEYS: &'static [&'static str];
    /// The keys this sets.
    fn set_keys(&self) -> Vec<&'static str>;
    /// Takes every setting `later` sets.
    fn merge(&mut self, later: &Self);
}

table! {
    /// `[admission.<name>]`: one origin semaphore.
    pub(crate) struct AdmissionLayer {
        /// Origin calls at once, `1..=1_000_000`; required.
        #[serde(deserialize_with = "values::count")]
        limit: u64,
        /// How long a load queues for a permit before it is shed (default 1s).
        #[serde(deserialize_with = "values::duration")]
        queue_timeout: Duration,
    }
}

/// One table's settings and where each was last set, so a refusal names the file and
/// line, the variable or the builder call.
#[derive(Debug, Clone, Default)]
struct Located<T> {
    value: T,
    at: BTreeMap<&'static str, At>,
    /// Where the table itself was first defined, for a setting it lacks.
    table: Option<At>,
}

impl<T: Layer> Located<T> {
    fn new(value: T, table: Option<At>, locate: impl Fn(&'static str) -> At) -> Self {
        let at = value
            .set_keys()
            .into_iter()
            .map(|k| (k, locate(k)))
            .collect();
        Located { value, at, table }
    }

    /// Set by a builder call, named by the table's dotted key.
    fn in_code(value: T, table: String) -> Self {
        let at = At::code(table.clone());
        Located::new(value, Some(at), |key| At::code(format!("{table}.{key}")))
    }

    fn merge(&mut self, later: Located<T>) {
        self.value.merge(&later.value);
        self.at.extend(later.at);
        if self.table.is_none() {
            self.table = later.table;
        }
    }

    /// `why` the setting `key` is refused, where it was set.
    fn refuse(&self, key: &str, why: impl Into<String>) -> ConfigError {
        let at = self.at.get(key).or(self.table.as_ref());
        ConfigError::new(at.cloned().unwrap_or_else(At::process), why)
    }
}

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
    backend: Located<BackendLayer>,
    admissions: BTreeMap<Arc<str>, Located<AdmissionLayer>>,
    functions: BTreeMap<Arc<str>, Located<Overrides>>,
    /// From `STAMPEDE_FUNCTION_*`, by the name as a variable writes it.
    env_functions: BTreeMap<String, Located<Overrides>>,
    clock: Option<Clock>,
}

impl RuntimeBuilder {
    /// Where values are stored (default [`Backend::Memory`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        // Both places are set, one of them to nothing, so code replaces whatever a file
        // or the environment said about either.
        let layer = BackendLayer {
            kind: Some(backend.kind()),
            url: Some(backend.url().map(str::to_owned)),
            nodes: Some(backend.nodes().map(<[String]>::to_vec).unwrap_or_default()),
            ..BackendLayer::default()
        };
        self.backend
            .merge(Located::in_code(layer, "backend".to_owned()));
        self
    }

    /// Defines the admission semaphore `name`: at most `limit` origin calls at once across
    /// the caches naming it; a load that queues longer than `queue_timeout` is shed.
    pub fn admission(
        mut self,
        name: impl Into<Arc<str>>,
        limit: usize,
        queue_timeout: Duration,
    ) -> Self {
        let name = name.into();
        let layer = AdmissionLayer {
            limit: Some(limit.try_into().unwrap_or(u64::MAX)),
            queue_timeout: Some(queue_timeout),
        };
        let table = format!("admission.{}", file::toml_key(&name));
        let located = Located::in_code(layer, table);
        self.admissions.entry(name).or_default().merge(located);
        self
    }

    /// Overrides settings of the cache named `name` (merged over earlier overrides of it).
    pub fn function(mut self, name: impl Into<Arc<str>>, overrides: Overrides) -> Self {
        let name = name.into();
        let table = format!("functions.{}", file::toml_key(&name));
        let located = Located::in_code(overrides, table);
        self.functions.entry(name).or_default().merge(located);
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

    /// Reads the TOML file at `path` over what is set so far. The file must parse and
    /// every key must be known; ranges are checked by [`build`](Self::build), and every
    /// error names the file, the line and the dotted key.
    pub fn file(self, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        self.read_file(path.as_ref(), None)
    }

    /// Reads `STAMPEDE_CONFIG`'s file, if set, then the `STAMPEDE_*` overrides (the
    /// README lists them). What a cache does on first use when nothing was installed.
    pub fn env(self) -> Result<Self, ConfigError> {
        env::apply(self, std::env::vars_os())
    }

    fn read_file(mut self, path: &Path, named_by: Option<&str>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            let by = named_by.map_or(String::new(), |v| format!(" (named by {v})"));
            ConfigError::new(
                At::file(path, "", None, None),
                format!("cannot read the stampede config file{by}: {error}"),
            )
        })?;
        let settings = file::parse(path, &text)?;
        self.backend.merge(settings.backend);
        for (name, admission) in settings.admissions {
            self.admissions.entry(name).or_default().merge(admission);
        }
        for (name, overrides) in settings.functions {
            self.functions.entry(name).or_default().merge(overrides);
        }
        Ok(self)
    }

    /// Checks every setting (in range, every admission a function names defined, no two
    /// function names that the environment cannot tell apart) and builds the runtime.
    pub fn build(self) -> Result<Runtime, ConfigError> {
        let settings = self
            .backend
            .value
            .resolve()
            .map_err(|(key, why)| self.backend.refuse(key, why))?;
        let backend = settings
            .available()
            .map_err(|(key, why)| self.backend.refuse(key, why))?;
        let mut admissions = HashMap::new();
        for (name, spec) in &self.admissions {
            let Some(limit) = spec.value.limit else {
                return Err(spec.refuse("", format!("admission `{name}` has no `limit`")));
            };
            let limit = stampede_settings::admission_limit("limit", limit)
                .map_err(|why| spec.refuse("limit", why))?;
            let queue_timeout = spec.value.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT);
            stampede_settings::positive("queue_timeout", queue_timeout)
                .map_err(|why| spec.refuse("queue_timeout", why))?;
            let admission = Admission::new(name.clone(), limit as usize, queue_timeout);
            admissions.insert(name.clone(), Arc::new(admission));
        }
        let mut by_env_name: BTreeMap<String, &Arc<str>> = BTreeMap::new();
        for name in self.functions.keys() {
            if let Some(other) = by_env_name.insert(env::env_name(name), name) {
                return Err(self.functions[name].refuse("", env::collision(other, name)));
            }
        }
        let functions = self.functions.values().chain(self.env_functions.values());
        for entry in functions {
            let overrides = &entry.value;
            overrides
                .check()
                .map_err(|(key, why)| entry.refuse(key, why))?;
            if let Some(admission) = overrides.admission.as_deref() {
                if !admissions.contains_key(admission) {
                    return Err(entry.refuse(
                        "admission",
                        format!("admission `{admission}` is not defined (add an `[admission.{}]` table with a `limit`)", file::toml_key(admission)),
                    ));
                }
            }
        }
        Ok(Runtime {
            shared: Arc::new(Shared {
                backend,
                settings,
                remote: OnceLock::new(),
                admissions,
                functions: (self.functions.into_iter())
                    .map(|(name, entry)| (name, entry.value))
                    .collect(),
                env_functions: (self.env_functions.into_iter())
                    .map(|(name, entry)| (name, entry.value))
                    .collect(),
                clock: self.clock.unwrap_or_default(),
                claimed: Mutex::new(BTreeMap::new()),
                caches: Mutex::new(Vec::new()),
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
        Err(ConfigError::new(At::process(), message))
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
    shared: Arc<Shared>,
}

struct Shared {
    backend: Backend,
    /// Every backend setting, defaults filled in, for the backends that read them.
    settings: BackendSettings,
    /// The shared store, connected on first use.
    remote: OnceLock<Result<Arc<Remote>, StoreError>>,
    admissions: HashMap<Arc<str>, Arc<Admission>>,
    functions: HashMap<Arc<str>, Overrides>,
    env_functions: HashMap<String, Overrides>,
    clock: Clock,
    /// The names caches were built with, by their environment form.
    claimed: Mutex<BTreeMap<String, Arc<str>>>,
    /// The caches built with this runtime, for [`Runtime::stats`] and metrics export.
    caches: Mutex<Vec<Weak<dyn Observed>>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut admissions: Vec<_> = self.shared.admissions.keys().collect();
        admissions.sort();
        f.debug_struct("Runtime")
            .field("backend", &self.shared.backend)
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
        self.shared.backend.clone()
    }

    /// This replica's connection to the shared store, made on first use (inside a Tokio
    /// runtime; outside one there is none and caches stay in memory). `None` for the
    /// memory backend.
    pub(crate) fn remote(&self) -> Option<&Arc<Remote>> {
        if self.shared.backend == Backend::Memory {
            return None;
        }
        // The store runs its connections on Tokio: connect only inside a runtime.
        tokio::runtime::Handle::try_current().ok()?;
        let remote = self
            .shared
            .remote
            .get_or_init(|| Remote::start(&self.shared.settings));
        match remote {
            Ok(remote) => Some(remote),
            Err(error) => {
                tracing::warn!(target: "stampede", %error, "no shared store: values stay in this process's memory");
                None
            }
        }
    }

    /// The shared store's counters: `None` for the memory backend, or before the first
    /// load connected it. `degraded_now` says loads skip the store (see the README's
    /// degraded mode).
    pub fn backend_stats(&self) -> Option<BackendStats> {
        let remote = self.shared.remote.get()?.as_ref().ok()?;
        let stats = remote.store().stats();
        Some(BackendStats {
            hits: stats.hits,
            misses: stats.misses,
            errors: stats.errors,
            late_answers: stats.late_answers,
            orphaned_leases_released: stats.orphans_released,
            decode_failures: stats.decode_failures,
            notices_sent: stats.notices_sent,
            notices_received: stats.notices_received,
            subscribed: stats.subscribed,
            degraded_now: stats.breaker != BreakerState::Closed,
            breaker_opened: stats.breaker_opened,
            degraded: stats.degraded,
            invalidations_queued: remote.queued() as u64,
        })
    }

    /// The limit and queue timeout of the admission semaphore `name`, if defined.
    pub fn admission(&self, name: &str) -> Option<(usize, Duration)> {
        let admission = self.shared.admissions.get(name)?;
        Some((admission.limit(), admission.queue_timeout()))
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
            .shared
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        caches.iter().filter_map(Weak::upgrade).collect()
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn admissions(&self) -> impl Iterator<Item = &Arc<Admission>> {
        self.shared.admissions.values()
    }

    /// The clock caches built with this runtime read, unless their builder sets one.
    pub(crate) fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// Records that a cache named `name` was built; the name that first claimed the same
    /// environment form, if any.
    fn claim(&self, env_name: String, name: &Arc<str>) -> Option<Arc<str>> {
        let mut claimed = self
            .shared
            .claimed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Some(
            claimed
                .entry(env_name)
                .or_insert_with(|| name.clone())
                .clone(),
        )
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
            .shared
            .claimed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut unclaimed: Vec<String> = self
            .shared
            .functions
            .keys()
            .filter(|name| !claimed.values().any(|c| c == *name))
            .map(|name| name.to_string())
            .collect();
        unclaimed.sort();
        let mut variables: Vec<String> = (self.shared.env_functions.keys())
            .filter(|env_name| !claimed.contains_key(*env_name))
            .map(|env_name| format!("{}{env_name}_*", env::FUNCTION))
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
            .shared
            .caches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        caches.retain(|c| c.strong_count() > 0);
        caches.push(cache);
    }

    /// The policy a cache runs with (its own, with this runtime's overrides for its name)
    /// and how its loads are admitted. An admission name nothing defines closes the gate:
    /// every load fails with [`Error::UnknownAdmission`], never a panic.
    pub(crate) fn bind(&self, policy: Policy) -> (Policy, Gate) {
        let name = policy.name().clone();
        let mut overrides = self
            .shared
            .functions
            .get(&name)
            .cloned()
            .unwrap_or_default();
        let env_name = env::env_name(&name);
        let from_env = self.shared.env_functions.get(&env_name);
        let claimed_by = self.claim(env_name, &name);
        if let Some(from_env) = from_env {
            if let Some(other) = claimed_by.filter(|other| *other != name) {
                // Which of the two the variables meant cannot be told: neither gets them.
                let at = At::env(&format!("{}{}_*", env::FUNCTION, env::env_name(&name)));
                let error = ConfigError::new(at, env::collision(&other, &name));
                tracing::error!(target: "stampede", %error);
                return (policy, Gate::Closed(Error::Config { cache: name, error }));
            }
            overrides.merge(from_env);
        }
        let policy = if overrides.is_empty() {
            policy
        } else {
            match overrides.apply(policy.clone().into_builder()).build() {
                Ok(overridden) => overridden,
                Err(error) => {
                    let at = At::code(format!("functions.{}", file::toml_key(&name)));
                    let error = ConfigError::new(at, error.to_string());
                    return (policy, Gate::Closed(Error::Config { cache: name, error }));
                }
            }
        };
        let gate = match policy.admission() {
            None => Gate::Open,
            Some(admission) => match self.shared.admissions.get(admission) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str) -> Policy {
        Policy::builder(name)
            .fresh(Duration::from_secs(60))
            .build()
            .unwrap()
    }

    #[test]
    fn overrides_replace_only_what_they_set() {
        let runtime = Runtime::builder()
            .admission("db", 4, Duration::from_millis(200))
            .function(
                "user-profile",
                Overrides::new()
                    .fresh(Duration::from_secs(5))
                    .admission("db")
                    .enabled(false),
            )
            .build()
            .unwrap();
        let own = Policy::builder("user-profile")
            .fresh(Duration::from_secs(60))
            .stale(Duration::from_secs(30))
            .build()
            .unwrap();
        let (bound, gate) = runtime.bind(own);
        assert_eq!(bound.fresh(), Duration::from_secs(5));
        assert_eq!(bound.stale(), Duration::from_secs(30), "kept");
        assert!(!bound.enabled());
        assert_eq!(gate.limit(), Some(4));
        let (other, gate) = runtime.bind(policy("other"));
        assert_eq!(other.fresh(), Duration::from_secs(60));
        assert!(matches!(gate, Gate::Open));
    }

    #[test]
    fn an_admission_nobody_defines_closes_the_gate_with_an_error_naming_it() {
        let runtime = Runtime::builder().build().unwrap();
        let own = Policy::builder("p")
            .fresh(Duration::from_secs(1))
            .admission("db")
            .build()
            .unwrap();
        let (_, gate) = runtime.bind(own);
        let Gate::Closed(error) = gate else {
            panic!("the gate is open")
        };
        assert_eq!(
            error,
            Error::UnknownAdmission {
                cache: "p".into(),
                admission: "db".into()
            }
        );
    }

    #[test]
    fn builder_settings_are_checked_at_build() {
        let undefined = Runtime::builder()
            .function("f", Overrides::new().admission("db"))
            .build()
            .unwrap_err();
        assert_eq!(undefined.key(), Some("functions.f.admission"));
        assert!(undefined
            .message()
            .contains("admission `db` is not defined"));
        let jitter = Runtime::builder()
            .function("f", Overrides::new().jitter(0.7))
            .build()
            .unwrap_err();
        assert_eq!(
            jitter.to_string(),
            "runtime builder: `functions.f.jitter`: jitter must be a fraction of fresh from 0.0 to 0.5 (0.15 means ±15 %), not 0.7"
        );
    }

    #[test]
    fn names_the_environment_cannot_tell_apart_are_refused_naming_both() {
        let error = Runtime::builder()
            .function("user-profile", Overrides::new().enabled(false))
            .function("user_profile", Overrides::new().enabled(true))
            .build()
            .unwrap_err();
        assert_eq!(
            error.message(),
            "the functions `user-profile` and `user_profile` are both `USER_PROFILE` in environment variables, so `STAMPEDE_FUNCTION_USER_PROFILE_*` could mean either; rename one"
        );
    }

    #[test]
    fn two_caches_one_environment_form_get_neither_variable() {
        let builder = env::apply(
            Runtime::builder(),
            [(
                "STAMPEDE_FUNCTION_USER_PROFILE_ENABLED".into(),
                "false".into(),
            )],
        );
        let runtime = builder.unwrap().build().unwrap();
        let (first, gate) = runtime.bind(policy("user-profile"));
        assert!(!first.enabled(), "the first claims the variables");
        assert!(matches!(gate, Gate::Open));
        let (_, gate) = runtime.bind(policy("user.profile"));
        let Gate::Closed(Error::Config { error, .. }) = gate else {
            panic!("an ambiguous variable was applied")
        };
        assert!(error
            .message()
            .contains("`user-profile` and `user.profile`"));
    }

    #[test]
    fn overrides_no_cache_claims_are_listed() {
        let runtime = env::apply(
            Runtime::builder()
                .function("user-profile", Overrides::new().enabled(false))
                .function("user-proflie", Overrides::new().enabled(false)),
            [
                ("STAMPEDE_FUNCTION_ORDERS_FRESH".into(), "1s".into()),
                ("STAMPEDE_FUNCTION_CARTS_FRESH".into(), "1s".into()),
                ("STAMPEDE_FUNCTION_BASKETS_FRESH".into(), "1s".into()),
            ],
        )
        .unwrap()
        .build()
        .unwrap();
        assert_eq!(
            runtime.unclaimed_functions(),
            [
                "user-profile",
                "user-proflie",
                "STAMPEDE_FUNCTION_BASKETS_*",
                "STAMPEDE_FUNCTION_CARTS_*",
                "STAMPEDE_FUNCTION_ORDERS_*"
            ]
        );
        runtime.bind(policy("user-profile"));
        runtime.bind(policy("orders"));
        runtime.bind(policy("carts"));
        runtime.bind(policy("baskets"));
        assert_eq!(runtime.unclaimed_functions(), ["user-proflie"]);
    }

    #[test]
    fn a_runtime_clock_reaches_its_caches() {
        let runtime = Runtime::builder().clock(Clock::tokio()).build().unwrap();
        assert!(matches!(runtime.clock(), c if format!("{c:?}").contains("Tokio")));
        assert!(format!("{:?}", Runtime::builder().build().unwrap().clock()).contains("System"));
    }

    /// The file and the environment read the attribute's grammar: the shared examples,
    /// through both.
    #[test]
    fn the_file_and_the_environment_read_the_one_duration_grammar() {
        use stampede_settings::examples::{DURATIONS, NOT_DURATIONS};
        let path = Path::new("stampede.toml");
        let from_file = |text: &str| {
            let settings = file::parse(path, &format!("[functions.f]\nstale = {text:?}\n"))?;
            let mut builder = Runtime::builder();
            for (name, overrides) in settings.functions {
                builder = builder.function(name, overrides.value);
            }
            Ok::<_, ConfigError>(builder.functions[&Arc::from("f")].value.stale)
        };
        let from_env = |text: &str| {
            let variables = [("STAMPEDE_FUNCTION_F_STALE".into(), text.into())];
            let builder = env::apply(Runtime::builder(), variables)?;
            Ok::<_, ConfigError>(builder.env_functions["F"].value.stale)
        };
        for &(text, millis) in DURATIONS {
            let expected = Some(Duration::from_millis(millis));
            assert_eq!(from_file(text), Ok(expected), "file: {text}");
            assert_eq!(from_env(text), Ok(expected), "environment: {text}");
        }
        for &(text, why) in NOT_DURATIONS {
            let refusal = format!("`{text}` is not a duration: {why}");
            let in_file = from_file(text).unwrap_err();
            assert_eq!(
                (in_file.line(), in_file.key()),
                (Some(2), Some("functions.f.stale"))
            );
            assert!(in_file.message().starts_with(&refusal), "{in_file}");
            let in_env = from_env(text).unwrap_err();
            assert_eq!(in_env.key(), Some("STAMPEDE_FUNCTION_F_STALE"));
            assert!(in_env.message().starts_with(&refusal), "{in_env}");
        }
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let error = Runtime::builder()
            .file("/nonexistent/stampede.toml")
            .unwrap_err();
        assert_eq!(error.path(), Some(Path::new("/nonexistent/stampede.toml")));
        assert!(
            error
                .to_string()
                .starts_with("/nonexistent/stampede.toml: cannot read the stampede config file: "),
            "{error}"
        );
    }
}
