//! The process's [`Runtime`]: which backend stores values, the admission semaphores, and
//! per-function overrides of the settings compiled into each policy.
//!
//! A runtime is built in code ([`Runtime::builder`]), from a TOML file
//! ([`RuntimeBuilder::file`], or the one `STAMPEDE_CONFIG` names) and from `STAMPEDE_*`
//! variables ([`RuntimeBuilder::env`]), in that order, later ones winning. One runtime is
//! the process's ([`RuntimeBuilder::install`]); a cache built without an explicit runtime
//! uses it, and when nothing was installed the first such cache reads the environment.
mod duration;
mod env;
mod error;
mod file;
mod overrides;
mod range;

pub use error::ConfigError;
pub use overrides::Overrides;

use crate::admission::{Admission, Gate};
use crate::error::Error;
use crate::policy::Policy;
use crate::stats::{Observed, Stats};
use error::At;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

/// How long a load queues for an admission permit before it is shed, unless configured.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// Where values are stored. Only the embedded memory store exists yet; the file's
/// `"redis"` and `"tiered"` kinds are refused with a message saying so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// moka in this process, typed values, no serialization.
    #[default]
    Memory,
}

impl Backend {
    fn from_kind(kind: &str) -> Result<Backend, String> {
        match kind {
            "memory" => Ok(Backend::Memory),
            "redis" | "tiered" => Err(format!(
                "backend kind `{kind}` arrives with the shared-store backend; only \"memory\" is available in this version"
            )),
            other => Err(format!(
                "unknown backend kind `{other}`, expected \"memory\" (\"redis\" and \"tiered\" arrive with the shared-store backend)"
            )),
        }
    }
}

#[derive(Debug, Clone)]
struct AdmissionSpec {
    limit: Option<usize>,
    queue_timeout: Option<Duration>,
    /// Where it was first defined, for a missing limit.
    at: At,
}

impl AdmissionSpec {
    fn new(at: At) -> Self {
        AdmissionSpec {
            limit: None,
            queue_timeout: None,
            at,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct FunctionEntry {
    overrides: Overrides,
    /// Where the admission name was set, to point at it if nothing defines it.
    admission_at: Option<At>,
}

impl FunctionEntry {
    fn merge(&mut self, later: FunctionEntry) {
        self.overrides.merge(&later.overrides);
        if later.admission_at.is_some() {
            self.admission_at = later.admission_at;
        }
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
    backend: Backend,
    admissions: BTreeMap<Arc<str>, AdmissionSpec>,
    functions: BTreeMap<Arc<str>, FunctionEntry>,
    /// From `STAMPEDE_FUNCTION_*`, by the name as a variable writes it.
    env_functions: BTreeMap<String, FunctionEntry>,
}

impl RuntimeBuilder {
    /// Where values are stored (default [`Backend::Memory`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
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
        let at = At::code(format!("admission.{}", file::toml_key(&name)));
        self.admissions.insert(
            name,
            AdmissionSpec {
                limit: Some(limit),
                queue_timeout: Some(queue_timeout),
                at,
            },
        );
        self
    }

    /// Overrides settings of the cache named `name` (merged over earlier overrides of it).
    pub fn function(mut self, name: impl Into<Arc<str>>, overrides: Overrides) -> Self {
        let name = name.into();
        let admission_at = overrides
            .admission
            .is_some()
            .then(|| At::code(format!("functions.{}.admission", file::toml_key(&name))));
        self.merge_function(name, overrides, admission_at);
        self
    }

    /// Overrides of one function, over what earlier sources set for it.
    fn merge_function(&mut self, name: Arc<str>, overrides: Overrides, admission_at: Option<At>) {
        self.functions
            .entry(name)
            .or_default()
            .merge(FunctionEntry {
                overrides,
                admission_at,
            });
    }

    /// Reads the TOML file at `path` over what is set so far. Every key is checked: an
    /// unknown key, a bad duration, an out-of-range number or an unknown backend kind is
    /// an error naming the file, the key and the line.
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
        if let Some(backend) = settings.backend {
            self.backend = backend;
        }
        for (name, limit, queue_timeout) in settings.admissions {
            let at = At::file(
                path,
                "",
                None,
                Some(format!("admission.{}", file::toml_key(&name))),
            );
            let spec = self
                .admissions
                .entry(name)
                .or_insert_with(|| AdmissionSpec::new(at));
            spec.limit = Some(limit);
            spec.queue_timeout = queue_timeout.or(spec.queue_timeout);
        }
        for (name, overrides, admission_at) in settings.functions {
            self.merge_function(name, overrides, admission_at);
        }
        Ok(self)
    }

    /// Checks the settings together (limits in range, every admission a function names
    /// defined) and builds the runtime.
    pub fn build(self) -> Result<Runtime, ConfigError> {
        let mut admissions = HashMap::new();
        for (name, spec) in &self.admissions {
            let limit = spec.limit.ok_or_else(|| {
                ConfigError::new(
                    spec.at.clone(),
                    format!("admission `{name}` has no `limit`"),
                )
            })?;
            if !(1..=range::MAX_LIMIT).contains(&limit) {
                let mut at = spec.at.clone();
                at.key = at.key.map(|k| format!("{k}.limit"));
                let message = range::limit(limit.try_into().unwrap_or(i64::MAX)).unwrap_err();
                return Err(ConfigError::new(at, message));
            }
            let queue_timeout = spec.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT);
            admissions.insert(
                name.clone(),
                Arc::new(Admission::new(name.clone(), limit, queue_timeout)),
            );
        }
        let entries = self.functions.iter().map(|(n, e)| (n.to_string(), e));
        let env_entries = self.env_functions.iter().map(|(n, e)| (n.clone(), e));
        for (name, entry) in entries.chain(env_entries) {
            // The same checks as a policy's, so a bad override fails here, not at a call.
            let trial = entry
                .overrides
                .apply(Policy::builder(name.as_str()).fresh(Duration::from_secs(1)))
                .build();
            if let Err(error) = trial {
                let at = At::code(format!("functions.{}", file::toml_key(&name)));
                return Err(ConfigError::new(at, error.to_string()));
            }
            if let Some(admission) = &entry.overrides.admission {
                if !admissions.contains_key(admission) {
                    let at = entry.admission_at.clone().unwrap_or_else(At::process);
                    return Err(ConfigError::new(
                        at,
                        format!("admission `{admission}` is not defined (add an `[admission.{}]` table with a `limit`)", file::toml_key(admission)),
                    ));
                }
            }
        }
        Ok(Runtime {
            shared: Arc::new(Shared {
                backend: self.backend,
                admissions,
                functions: self
                    .functions
                    .into_iter()
                    .map(|(name, entry)| (name, entry.overrides))
                    .collect(),
                env_functions: self
                    .env_functions
                    .into_iter()
                    .map(|(name, entry)| (name, entry.overrides))
                    .collect(),
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
    admissions: HashMap<Arc<str>, Arc<Admission>>,
    functions: HashMap<Arc<str>, Overrides>,
    env_functions: HashMap<String, Overrides>,
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
        self.shared.backend
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
        if let Some(from_env) = self.shared.env_functions.get(&env::env_name(&name)) {
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
            "runtime builder: `functions.f`: policy `f`: `jitter` must be within 0.0..=0.5"
        );
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
