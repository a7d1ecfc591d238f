//! The settings a [`Runtime`](crate::Runtime) is built from: which backend stores values,
//! the admission semaphores, and per-function overrides of the settings compiled into each
//! policy.
//!
//! Three sources fill the same serde models ([`Overrides`], the backend and admission
//! tables): code (the builder's calls), a TOML file (`file`) and `STAMPEDE_*` variables
//! (`env`), in that order, later ones winning key by key. [`Layers`] holds what they set,
//! each setting with where it was set; [`Layers::check`] checks everything in one place and
//! gives the [`Config`] a runtime runs on, or an error naming the file and line, the
//! variable or the builder call at fault. Nothing here knows the runtime.
/// Declares a table of settings: the serde model, one optional field per key (what one
/// source sets; unknown keys refused), and how sources layer over each other. A key may
/// have a second spelling (`xfetch or "xfetch_beta"`): one setting, so a later source
/// writing either replaces what an earlier one wrote in either.
macro_rules! table {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {$(
            $(#[doc = $doc:literal])*
            $(#[serde($($serde:tt)*)])?
            $field:ident $(or $alias:literal)?: $ty:ty,
        )*}
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {$(
            $(#[doc = $doc])*
            #[serde(default $(, alias = $alias)? $(, $($serde)*)?)]
            pub(crate) $field: Option<$ty>,
        )*}

        impl $crate::config::Layer for $name {
            const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
            const ALIASES: &'static [(&'static str, &'static str)] =
                &[$($(($alias, stringify!($field)),)?)*];

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
mod secret;
mod values;

pub use backend::Backend;
pub use error::ConfigError;
pub use overrides::Overrides;

pub(crate) use backend::BackendSettings;
pub(crate) use env::{env_name, FUNCTION};
#[cfg(feature = "redis")]
pub(crate) use secret::{redacted, Secret};

use env::collision;
use error::At;
use file::toml_key;

use crate::policy::Policy;
use backend::BackendLayer;
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a load queues for an admission permit before it is shed, unless configured.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// A table of settings each source may set part of; later sources win key by key.
pub(crate) trait Layer: Default {
    /// Every key, as the file writes it.
    const KEYS: &'static [&'static str];
    /// The keys' second spellings, each with its key.
    const ALIASES: &'static [(&'static str, &'static str)];
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
        /// Permits only high-priority loads take, below `limit` (default 0).
        #[serde(deserialize_with = "values::count")]
        reserved_high: u64,
        /// Queued loads at which a low-priority load is shed at once (default: none,
        /// every priority queues for `queue_timeout`).
        #[serde(deserialize_with = "values::count")]
        low_queue: u64,
        /// Permits the loads of one key group hold at most at once (default: none).
        #[serde(deserialize_with = "values::count")]
        per_group: u64,
        /// Whose origin calls `limit` bounds: each replica's (`"replica"`, the default)
        /// or the whole fleet's (`"fleet"`, held in the shared store).
        scope: Scope,
        /// A fleet-wide admission's permits one replica takes on its own while the
        /// shared store cannot be reached, `1..=limit` (default: a quarter of the limit,
        /// rounded up).
        #[serde(deserialize_with = "values::count")]
        local_limit: u64,
        /// How long a fleet-wide permit outlives its holder's last renewal (default 2s):
        /// a dead replica's permits come back within it.
        #[serde(deserialize_with = "values::duration")]
        permit_ttl: Duration,
    }
}

/// Whose origin calls an admission's limit bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scope {
    /// Each replica's, on its own.
    #[default]
    Replica,
    /// The whole fleet's: the permits are held in the shared store.
    Fleet,
}

/// The shortest `permit_ttl`: renewed every quarter of it, a permit must outlive a
/// renewal that waits out a response timeout (250 ms by default) and one more.
pub(crate) const MIN_PERMIT_TTL: Duration = Duration::from_secs(1);

/// The default of `permit_ttl`.
pub(crate) const DEFAULT_PERMIT_TTL: Duration = Duration::from_secs(2);

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

/// What the sources set so far, each setting with where it was set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Layers {
    backend: Located<BackendLayer>,
    admissions: BTreeMap<Arc<str>, Located<AdmissionLayer>>,
    functions: BTreeMap<Arc<str>, Located<Overrides>>,
    /// From `STAMPEDE_FUNCTION_*`, by the name as a variable writes it.
    env_functions: BTreeMap<String, Located<Overrides>>,
}

/// How one admission shares its permits: between priorities, and between key groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shares {
    /// Permits only high-priority loads take, below the limit.
    pub(crate) reserved_high: usize,
    /// Queued loads at which a low-priority load is shed at once.
    pub(crate) low_queue: Option<usize>,
    /// Permits one key group holds at most at once (see `CacheBuilder::admission_group`).
    pub(crate) per_group: Option<usize>,
}

/// A fleet-wide admission's settings (`scope = "fleet"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FleetWide {
    /// Permits a replica takes on its own while the shared store cannot be reached.
    pub(crate) local_limit: usize,
    /// How long a permit outlives its holder's last renewal.
    pub(crate) permit_ttl: Duration,
}

/// One admission semaphore's checked settings.
#[derive(Debug, Clone)]
pub(crate) struct AdmissionSettings {
    pub(crate) limit: usize,
    pub(crate) queue_timeout: Duration,
    pub(crate) shares: Shares,
    /// `None`: each replica's limit.
    pub(crate) fleet: Option<FleetWide>,
}

/// Every setting, checked: what a runtime is built on.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) backend: Backend,
    /// Every backend setting, defaults filled in, for the backends that read them.
    pub(crate) backend_settings: BackendSettings,
    pub(crate) admissions: HashMap<Arc<str>, AdmissionSettings>,
    pub(crate) functions: HashMap<Arc<str>, Overrides>,
    /// From `STAMPEDE_FUNCTION_*`, by the name as a variable writes it.
    pub(crate) env_functions: HashMap<String, Overrides>,
}

impl Config {
    /// `policy` with the overrides of its name: code's and the file's, then its variables'.
    /// `first_claim` is the name that first claimed the environment form of the policy's
    /// name: when that is another name, the variables could mean either, and neither
    /// gets them.
    pub(crate) fn policy_of(
        &self,
        policy: Policy,
        first_claim: &Arc<str>,
    ) -> Result<Policy, ConfigError> {
        let name = policy.name();
        let env_name = env_name(name);
        let mut overrides = self.functions.get(name).cloned().unwrap_or_default();
        if let Some(from_env) = self.env_functions.get(&env_name) {
            if first_claim != name {
                let at = At::env(&format!("{FUNCTION}{env_name}_*"));
                return Err(ConfigError::new(at, collision(first_claim, name)));
            }
            overrides.merge(from_env);
        }
        if overrides.is_empty() {
            return Ok(policy);
        }
        let at = || At::code(format!("functions.{}", toml_key(name)));
        (overrides.apply(policy.clone().into_builder()).build())
            .map_err(|error| ConfigError::new(at(), error.to_string()))
    }
}

impl Layers {
    /// Sets the backend in code.
    pub(crate) fn set_backend(&mut self, backend: &Backend) {
        // Both places are set, one of them to nothing, so code replaces whatever a file
        // or the environment said about either.
        let layer = BackendLayer {
            kind: Some(backend.kind()),
            url: Some(backend.url().map(secret::RedisUrl::new)),
            nodes: Some(
                (backend.nodes().unwrap_or_default().iter())
                    .map(secret::RedisUrl::new)
                    .collect(),
            ),
            ..BackendLayer::default()
        };
        self.backend
            .merge(Located::in_code(layer, "backend".to_owned()));
    }

    /// Defines the admission semaphore `name` in code.
    pub(crate) fn set_admission(&mut self, name: Arc<str>, limit: usize, queue_timeout: Duration) {
        let layer = AdmissionLayer {
            limit: Some(limit.try_into().unwrap_or(u64::MAX)),
            queue_timeout: Some(queue_timeout),
            ..AdmissionLayer::default()
        };
        self.set_admission_layer(name, layer);
    }

    /// The admission semaphore `name`'s share per key group, in code.
    pub(crate) fn set_admission_per_group(&mut self, name: Arc<str>, per_group: usize) {
        let layer = AdmissionLayer {
            per_group: Some(per_group.try_into().unwrap_or(u64::MAX)),
            ..AdmissionLayer::default()
        };
        self.set_admission_layer(name, layer);
    }

    /// Makes the admission semaphore `name` fleet-wide, in code.
    pub(crate) fn set_admission_fleet_wide(&mut self, name: Arc<str>, local_limit: Option<usize>) {
        let layer = AdmissionLayer {
            scope: Some(Scope::Fleet),
            local_limit: local_limit.map(|at| at.try_into().unwrap_or(u64::MAX)),
            ..AdmissionLayer::default()
        };
        self.set_admission_layer(name, layer);
    }

    /// How the admission semaphore `name` shares its permits between priorities, in code.
    pub(crate) fn set_admission_shares(
        &mut self,
        name: Arc<str>,
        reserved_high: usize,
        low_queue: Option<usize>,
    ) {
        let layer = AdmissionLayer {
            reserved_high: Some(reserved_high.try_into().unwrap_or(u64::MAX)),
            low_queue: low_queue.map(|at| at.try_into().unwrap_or(u64::MAX)),
            ..AdmissionLayer::default()
        };
        self.set_admission_layer(name, layer);
    }

    /// The settings `layer` sets for the admission semaphore `name`, merged over earlier
    /// ones as set in code.
    fn set_admission_layer(&mut self, name: Arc<str>, layer: AdmissionLayer) {
        let table = format!("admission.{}", toml_key(&name));
        let located = Located::in_code(layer, table);
        self.admissions.entry(name).or_default().merge(located);
    }

    /// Overrides settings of the cache named `name` in code.
    pub(crate) fn set_function(&mut self, name: Arc<str>, overrides: Overrides) {
        let table = format!("functions.{}", toml_key(&name));
        let located = Located::in_code(overrides, table);
        self.functions.entry(name).or_default().merge(located);
    }

    /// Reads the TOML file at `path` over what is set so far; `named_by` is the variable
    /// that named it, for the error.
    pub(crate) fn read_file(
        &mut self,
        path: &Path,
        named_by: Option<&str>,
    ) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Sets one key of the `[backend]` table in code, from its text as a variable
    /// would give it (`"tls_ca_file"`, `"/etc/redis/ca.pem"`).
    pub(crate) fn set_backend_key(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let at = At::code(format!("backend.{key}"));
        let layer =
            env::backend_key(key, value).map_err(|why| ConfigError::new(at.clone(), why))?;
        self.backend
            .merge(Located::new(layer, None, |_| at.clone()));
        Ok(())
    }

    /// Reads the variables among `vars` that are stampede's over what is set so far.
    pub(crate) fn read_env(
        &mut self,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<(), ConfigError> {
        env::apply(self, vars)
    }

    /// Checks every setting (in range, every admission a function names defined, no two
    /// function names that the environment cannot tell apart). `reachable` checks that the
    /// shared store's settings describe something this build can connect to (URLs it
    /// parses, files it reads, TLS it has), blaming the key at fault; config itself knows
    /// no client.
    pub(crate) fn check(
        self,
        reachable: impl FnOnce(&BackendSettings) -> Result<(), (&'static str, String)>,
    ) -> Result<Config, ConfigError> {
        let backend_settings =
            (self.backend.value.resolve()).map_err(|(key, why)| self.backend.refuse(key, why))?;
        let backend =
            (backend_settings.available()).map_err(|(key, why)| self.backend.refuse(key, why))?;
        if !cfg!(feature = "redis") && backend != Backend::Memory {
            // Refused here, not at the first load: a fleet that silently cached per process
            // would break every guarantee the shared store gives.
            return Err(self.backend.refuse(
                "kind",
                "the \"redis\" and \"tiered\" kinds need stampede's `redis` feature (on by default), which this build leaves out".to_owned(),
            ));
        }
        if backend != Backend::Memory {
            reachable(&backend_settings).map_err(|(key, why)| self.backend.refuse(key, why))?;
        }
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
            let reserved_high = spec.value.reserved_high.unwrap_or(0);
            if reserved_high >= limit {
                let why = format!(
                    "reserved_high must be below the limit ({limit}): every priority needs a permit"
                );
                return Err(spec.refuse("reserved_high", why));
            }
            // Optional counts: unset means none, and 0 is a mistake, not "none".
            let count = |key: &'static str, value: Option<u64>, max: u64, unset: &str| match value {
                Some(0) => Err(spec.refuse(key, format!("{key} must be at least 1 ({unset})"))),
                Some(at) if at > max => {
                    Err(spec.refuse(key, format!("{key} must be at most the limit ({max})")))
                }
                at => Ok(at.map(|at| usize::try_from(at).unwrap_or(usize::MAX))),
            };
            let low_queue = count(
                "low_queue",
                spec.value.low_queue,
                u64::MAX,
                "leave it out to let low-priority loads queue",
            )?;
            let per_group = count(
                "per_group",
                spec.value.per_group,
                limit,
                "leave it out for no share per key group",
            )?;
            let local_limit = count(
                "local_limit",
                spec.value.local_limit,
                limit,
                "leave it out for a quarter of the limit",
            )?;
            let fleet = match spec.value.scope.unwrap_or_default() {
                Scope::Fleet => {
                    let permit_ttl = spec.value.permit_ttl.unwrap_or(DEFAULT_PERMIT_TTL);
                    if permit_ttl < MIN_PERMIT_TTL {
                        let why = format!("permit_ttl must be at least {MIN_PERMIT_TTL:?}: a permit is renewed a few times within it");
                        return Err(spec.refuse("permit_ttl", why));
                    }
                    Some(FleetWide {
                        local_limit: local_limit
                            .unwrap_or_else(|| usize::try_from(limit.div_ceil(4)).unwrap_or(1)),
                        permit_ttl,
                    })
                }
                Scope::Replica => {
                    let fleet_only = [
                        ("local_limit", spec.value.local_limit.is_some()),
                        ("permit_ttl", spec.value.permit_ttl.is_some()),
                    ];
                    if let Some((key, _)) = fleet_only.into_iter().find(|(_, set)| *set) {
                        let why = format!(
                            "{key} applies to a fleet-wide admission only: add scope = \"fleet\""
                        );
                        return Err(spec.refuse(key, why));
                    }
                    None
                }
            };
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            admissions.insert(
                name.clone(),
                AdmissionSettings {
                    limit,
                    queue_timeout,
                    shares: Shares {
                        reserved_high: usize::try_from(reserved_high).unwrap_or(usize::MAX),
                        low_queue,
                        per_group,
                    },
                    fleet,
                },
            );
        }
        let mut by_env_name: BTreeMap<String, &Arc<str>> = BTreeMap::new();
        for name in self.functions.keys() {
            if let Some(other) = by_env_name.insert(env_name(name), name) {
                return Err(self.functions[name].refuse("", collision(other, name)));
            }
        }
        for entry in self.functions.values().chain(self.env_functions.values()) {
            let overrides = &entry.value;
            overrides
                .check()
                .map_err(|(key, why)| entry.refuse(key, why))?;
            if let Some(admission) = overrides.admission.as_deref()
                && !admissions.contains_key(admission)
            {
                return Err(entry.refuse(
                        "admission",
                        format!("admission `{admission}` is not defined (add an `[admission.{}]` table with a `limit`)", toml_key(admission)),
                    ));
            }
        }
        Ok(Config {
            backend,
            backend_settings,
            admissions,
            functions: (self.functions.into_iter())
                .map(|(name, entry)| (name, entry.value))
                .collect(),
            env_functions: (self.env_functions.into_iter())
                .map(|(name, entry)| (name, entry.value))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests;
