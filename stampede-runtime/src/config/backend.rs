//! Where values are stored: the backend kind and the shared-store settings, declared once
//! for the file's `[backend]` table and the `STAMPEDE_BACKEND` / `STAMPEDE_REDIS_*`
//! variables.
use super::secret::{redacted, RedisUrl, Secret};
use super::values;
use serde::Deserialize;
use stampede_settings as settings;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Where values are stored. Each [`Runtime`](crate::Runtime) is one replica: it owns its
/// connections and memory, so several runtimes in one process behave like several
/// processes sharing one Redis.
///
/// Only caches whose key and value serde can write (not `local`) go to Redis; a `local`
/// cache stays in memory under any backend.
///
/// ```
/// use stampede_runtime::{Backend, Runtime};
/// // Connecting is lazy: an unreachable Redis is not a start-up failure.
/// let runtime = Runtime::builder()
///     .backend(Backend::redis("redis://127.0.0.1:6379/"))
///     .build()
///     .unwrap();
/// assert_eq!(runtime.backend(), Backend::redis("redis://127.0.0.1:6379/"));
/// ```
///
/// Printed, with `{}` or `{:?}`, a URL's password is `***`, so a backend can be logged
/// or served on a health endpoint as it is:
///
/// ```
/// use stampede_runtime::Backend;
/// let backend = Backend::tiered("rediss://app:s3cret@cache:6380/0");
/// assert_eq!(backend.to_string(), "tiered, rediss://app:***@cache:6380/0");
/// assert!(!format!("{backend:?}").contains("s3cret"));
/// ```
///
/// The URL may also name a set of Redis Sentinels and the master they watch:
/// `redis+sentinel://[user:password@]host:port[,host:port…]/<master name>[/<db>]`
/// (`rediss+sentinel://` for TLS to the sentinels and the master).
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// moka in this process, typed values, no serialization.
    #[default]
    Memory,
    /// Values live in Redis only: every call reads Redis (callers of one key in this
    /// process still share one read and one load).
    Redis {
        /// `redis://host:6379/0`, `rediss://…`.
        url: String,
    },
    /// moka in front of Redis: hits are served from memory, misses read Redis before the
    /// origin, and an invalidation reaches every replica's memory.
    Tiered {
        /// `redis://host:6379/0`, `rediss://…`.
        url: String,
    },
    /// [`Backend::Redis`] on a Redis Cluster: each key's entries live on the master that
    /// owns its slot.
    RedisCluster {
        /// Seed nodes, `redis://host:port` each; the client discovers the rest. List
        /// more than one: the notice subscription moves only among the listed nodes.
        nodes: Vec<String>,
    },
    /// [`Backend::Tiered`] on a Redis Cluster.
    TieredCluster {
        /// Seed nodes, `redis://host:port` each (see [`Backend::RedisCluster`]).
        nodes: Vec<String>,
    },
}

impl Backend {
    /// Values in Redis at `url`, no process memory.
    pub fn redis(url: impl Into<String>) -> Self {
        Backend::Redis { url: url.into() }
    }

    /// Memory in front of Redis at `url`.
    pub fn tiered(url: impl Into<String>) -> Self {
        Backend::Tiered { url: url.into() }
    }

    /// Values in the Redis Cluster reached through `nodes`, no process memory.
    pub fn redis_cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Backend::RedisCluster {
            nodes: nodes.into_iter().map(Into::into).collect(),
        }
    }

    /// Memory in front of the Redis Cluster reached through `nodes`.
    pub fn tiered_cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Backend::TieredCluster {
            nodes: nodes.into_iter().map(Into::into).collect(),
        }
    }

    /// The Redis URL, for the single-node shared backends.
    pub(crate) fn url(&self) -> Option<&str> {
        match self {
            Backend::Redis { url } | Backend::Tiered { url } => Some(url),
            _ => None,
        }
    }

    /// The seed nodes, for the cluster backends.
    pub(crate) fn nodes(&self) -> Option<&[String]> {
        match self {
            Backend::RedisCluster { nodes } | Backend::TieredCluster { nodes } => Some(nodes),
            _ => None,
        }
    }

    /// `"memory"`, `"redis"` or `"tiered"`: what the file's `kind` says (a cluster is a
    /// `redis` or `tiered` backend given `nodes`).
    pub fn kind_name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The file's `kind` for this backend.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Backend::Memory => Kind::Memory,
            Backend::Redis { .. } | Backend::RedisCluster { .. } => Kind::Redis,
            Backend::Tiered { .. } | Backend::TieredCluster { .. } => Kind::Tiered,
        }
    }

    /// For the shared backends, whether memory keeps copies in front of Redis.
    pub(crate) fn keeps_memory(&self) -> Option<bool> {
        match self.kind() {
            Kind::Memory => None,
            Kind::Redis => Some(false),
            Kind::Tiered => Some(true),
        }
    }
}

impl fmt::Display for Backend {
    /// The kind, then where it connects, passwords as `***`: `tiered, redis://…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind_name())?;
        if let Some(url) = self.url() {
            write!(f, ", {}", redacted(url))?;
        }
        if let Some(nodes) = self.nodes() {
            let nodes: Vec<_> = nodes.iter().map(|node| redacted(node)).collect();
            write!(f, ", cluster [{}]", nodes.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => f.write_str("Memory"),
            Backend::Redis { url } | Backend::Tiered { url } => {
                let name = if matches!(self, Backend::Redis { .. }) {
                    "Redis"
                } else {
                    "Tiered"
                };
                f.debug_struct(name).field("url", &redacted(url)).finish()
            }
            Backend::RedisCluster { nodes } | Backend::TieredCluster { nodes } => {
                let name = match self {
                    Backend::RedisCluster { .. } => "RedisCluster",
                    _ => "TieredCluster",
                };
                let nodes: Vec<_> = nodes.iter().map(|node| redacted(node)).collect();
                f.debug_struct(name).field("nodes", &nodes).finish()
            }
        }
    }
}

/// The file's `kind`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    #[default]
    Memory,
    Redis,
    Tiered,
}

/// Declares the backend settings: the serde model with one optional field each (what one
/// source sets), and [`BackendSettings`] with every default filled in.
macro_rules! backend_settings {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $ty:ty $(, parse $with:literal)? = $default:expr, check $check:expr;
    )*) => {
        table! {
            /// What one source (code, file, environment) sets of `[backend]`.
            pub(crate) struct BackendLayer {$(
                $(#[serde(deserialize_with = $with)])?
                $field: $ty,
            )*}
        }

        /// The backend settings, defaults filled in.
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) struct BackendSettings {
            $($(#[doc = $doc])* pub(crate) $field: $ty,)*
        }

        impl BackendLayer {
            /// The settings with defaults for what no source set, each checked: the key at
            /// fault and why.
            pub(crate) fn resolve(&self) -> Result<BackendSettings, (&'static str, String)> {
                Ok(BackendSettings {
                    $($field: {
                        let value: $ty = self.$field.clone().unwrap_or_else(|| $default);
                        let check: fn(&str, &$ty) -> Result<(), String> = $check;
                        check(stringify!($field), &value).map_err(|why| (stringify!($field), why))?;
                        value
                    },)*
                })
            }
        }
    };
}

backend_settings! {
    /// `memory` (default), `redis` or `tiered` (memory in front of Redis).
    kind: Kind = Kind::Memory, check |_, _| Ok(());
    /// The Redis URL (`redis://host:6379/0`, `rediss://…` for TLS,
    /// `redis+sentinel://host:26379,…/<master>` for the master a set of Sentinels names).
    url: Option<RedisUrl> = None, check |key, url| match url {
        Some(url) if !url.expose().contains("://") => Err(format!("{key} must be a URL such as \"redis://127.0.0.1:6379\", not `{url}`")),
        _ => Ok(()),
    };
    /// Redis Cluster seed nodes (`redis://host:port` each), instead of `url`.
    nodes: Vec<RedisUrl> = Vec::new(), check |key, nodes| nodes.iter().try_for_each(|node| match node {
        node if !node.expose().contains("://") => Err(format!("{key} must be URLs such as \"redis://10.0.0.1:6379\", not `{node}`")),
        node => filled(key, node.expose()),
    });
    /// Prefix of every key and channel stampede writes (default `stampede`).
    prefix: String = "stampede".to_owned(), check |key, prefix| filled(key, prefix);
    /// How long one Redis command may take before it counts as failed (default 250ms).
    response_timeout: Duration, parse "values::duration" = Duration::from_millis(250), check positive;
    /// How long connecting may take (default 1s).
    connect_timeout: Duration, parse "values::duration" = Duration::from_secs(1), check positive;
    /// Consecutive failures that open the circuit breaker (default 5).
    breaker_failures: u32, parse "values::count" = 5, check |key, n| at_least_one(key, *n as u64);
    /// How long an open breaker waits before it tries Redis again (default 1s).
    breaker_cooldown: Duration, parse "values::duration" = Duration::from_secs(1), check positive;
    /// The largest encoded value written to a shared store (default 8 MiB).
    max_value_bytes: u64, parse "values::count" = 8 * 1024 * 1024, check |key, n| at_least_one(key, *n);
    /// How long a value loaded while the shared store cannot be read stays servable in
    /// this replica's memory, where no invalidation from another replica can reach it
    /// (default: each cache's stale window).
    degraded_ttl: Option<Duration>, parse "values::some_duration" = None, check |_, _| Ok(());
    /// How long a tiered replica serves its memory copies after it last confirmed that its
    /// notice subscription delivers (it confirms every quarter of this); past it, reads
    /// go to Redis until it hears again. An acknowledged invalidation waits at most this
    /// long for a replica that does not answer (default 500ms, at least 10ms).
    hearing_lease: Duration, parse "values::duration" = Duration::from_millis(500), check hearing_lease;
    /// The ACL user to authenticate as (default: the URL's, else Redis's `default` user).
    username: Option<String> = None, check |key, name| name.as_deref().map_or(Ok(()), |name| filled(key, name));
    /// The password (default: the URL's). Prefer `password_file` (a mounted secret) or
    /// the `STAMPEDE_REDIS_PASSWORD` variable to a password written in a file.
    password: Option<Secret> = None, check |_, _| Ok(());
    /// A file whose contents are the password (one trailing newline is ignored).
    password_file: Option<PathBuf> = None, check |_, _| Ok(());
    /// What each replica's connections are named on the server (`CLIENT SETNAME
    /// <client_name>-<replica id>`), so `CLIENT LIST` tells them apart (default `stampede`).
    client_name: String = "stampede".to_owned(), check client_name;
    /// A PEM file of the certificate authorities that sign the server's certificate,
    /// trusted instead of the platform's (a private CA).
    tls_ca_file: Option<PathBuf> = None, check |_, _| Ok(());
    /// The same, as PEM text.
    tls_ca_pem: Option<String> = None, check |_, _| Ok(());
    /// A PEM file with this client's certificate (chain), for mutual TLS.
    tls_cert_file: Option<PathBuf> = None, check |_, _| Ok(());
    /// A PEM file with the private key of `tls_cert_file`.
    tls_key_file: Option<PathBuf> = None, check |_, _| Ok(());
    /// Accept any server certificate, for self-signed test setups only: nothing then
    /// proves the server is the one named (default false; logged as a warning).
    tls_insecure: bool = false, check |_, _| Ok(());
    /// The ACL user the Sentinels are asked as, when they require one.
    sentinel_username: Option<String> = None, check |key, name| name.as_deref().map_or(Ok(()), |name| filled(key, name));
    /// The Sentinels' password, when they require one.
    sentinel_password: Option<Secret> = None, check |_, _| Ok(());
}

fn hearing_lease(key: &str, lease: &Duration) -> Result<(), String> {
    match *lease < Duration::from_millis(10) {
        true => Err(format!("{key} must be at least 10ms, not {lease:?}")),
        false => Ok(()),
    }
}

fn positive(key: &str, duration: &Duration) -> Result<(), String> {
    settings::positive(key, *duration).map(drop)
}

fn at_least_one(key: &str, count: u64) -> Result<(), String> {
    match count {
        0 => Err(format!("{key} must be at least 1")),
        _ => Ok(()),
    }
}

/// A name `CLIENT SETNAME` takes: printable, without spaces.
fn client_name(key: &str, name: &String) -> Result<(), String> {
    filled(key, name)?;
    match name.chars().all(|c| c.is_ascii_graphic()) {
        true => Ok(()),
        false => Err(format!(
            "{key} must be printable ASCII without spaces (Redis refuses other client names), not `{name}`"
        )),
    }
}

fn filled(key: &str, text: &str) -> Result<(), String> {
    match text.trim() {
        "" => Err(format!("{key} must not be empty")),
        _ => Ok(()),
    }
}

impl BackendSettings {
    /// Settings from `(key, text)` pairs as variables give them, defaults for the rest.
    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(&str, &str)]) -> Result<Self, String> {
        use super::Layer;
        let mut layer = BackendLayer::default();
        for (key, value) in pairs {
            layer.merge(&super::env::backend_key(key, value)?);
        }
        layer
            .resolve()
            .map_err(|(key, why)| format!("{key}: {why}"))
    }

    /// The backend these settings describe. A shared kind needs one `url` or a list of
    /// cluster `nodes`, never both.
    pub(crate) fn available(&self) -> Result<Backend, (&'static str, String)> {
        let nodes = (!self.nodes.is_empty()).then(|| {
            self.nodes
                .iter()
                .map(|node| node.expose().to_owned())
                .collect()
        });
        let url = self.url.as_ref().map(RedisUrl::expose);
        match (self.kind, url, nodes) {
            (_, Some(_), Some(_)) => Err((
                "nodes",
                "give either one `url` (a single Redis) or `nodes` (a Redis Cluster), not both"
                    .into(),
            )),
            (Kind::Memory, Some(_), None) => Err((
                "url",
                "a Redis `url` with the \"memory\" kind would be ignored; set `kind = \"redis\"` or `\"tiered\"`".into(),
            )),
            (Kind::Memory, None, Some(_)) => Err((
                "nodes",
                "Redis Cluster `nodes` with the \"memory\" kind would be ignored; set `kind = \"redis\"` or `\"tiered\"`".into(),
            )),
            (Kind::Memory, None, None) => Ok(Backend::Memory),
            // Blamed on `kind`, the key that asked for a place to connect to.
            (kind, None, None) => Err((
                "kind",
                format!(
                    "backend kind `{}` needs a `url` such as \"redis://127.0.0.1:6379\" (or cluster `nodes`)",
                    kind.as_str()
                ),
            )),
            (Kind::Redis, Some(url), None) => Ok(Backend::redis(url)),
            (Kind::Tiered, Some(url), None) => Ok(Backend::tiered(url)),
            (Kind::Redis, None, Some(nodes)) => Ok(Backend::RedisCluster { nodes }),
            (Kind::Tiered, None, Some(nodes)) => Ok(Backend::TieredCluster { nodes }),
        }
    }
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Redis => "redis",
            Kind::Tiered => "tiered",
        }
    }
}
