//! Where values are stored: the backend kind and the shared-store settings, declared once
//! for the file's `[backend]` table and the `STAMPEDE_BACKEND` / `STAMPEDE_REDIS_*`
//! variables.
use super::values;
use serde::Deserialize;
use stampede_settings as settings;
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// origin, and an invalidation reaches every node's memory.
    Tiered {
        /// `redis://host:6379/0`, `rediss://…`.
        url: String,
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

    /// The Redis URL, for the shared backends.
    pub(crate) fn url(&self) -> Option<&str> {
        match self {
            Backend::Memory => None,
            Backend::Redis { url } | Backend::Tiered { url } => Some(url),
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
        // `nodes` and `connect_timeout` wait for Redis Cluster support.
        #[allow(dead_code)]
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
    /// The Redis URL (`redis://host:6379/0`, `rediss://…`).
    url: Option<String> = None, check |key, url| match url {
        Some(url) if !url.contains("://") => Err(format!("{key} must be a URL such as \"redis://127.0.0.1:6379\", not `{url}`")),
        _ => Ok(()),
    };
    /// Redis Cluster seed nodes, instead of `url`.
    nodes: Vec<String> = Vec::new(), check |key, nodes| nodes.iter().try_for_each(|n| filled(key, n));
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

fn filled(key: &str, text: &str) -> Result<(), String> {
    match text.trim() {
        "" => Err(format!("{key} must not be empty")),
        _ => Ok(()),
    }
}

impl BackendSettings {
    /// The backend these settings describe. A shared kind needs a `url`; Redis Cluster
    /// `nodes` are parsed and checked but refused until the cluster store exists, never
    /// silently ignored.
    pub(crate) fn available(&self) -> Result<Backend, (&'static str, String)> {
        if !self.nodes.is_empty() {
            return Err((
                "nodes",
                "Redis Cluster `nodes` are not available in this version; give one `url`".into(),
            ));
        }
        let url = || {
            // Blamed on `kind`, the key that asked for a URL.
            self.url.clone().ok_or((
                "kind",
                format!(
                    "backend kind `{}` needs a `url` such as \"redis://127.0.0.1:6379\"",
                    self.kind.as_str()
                ),
            ))
        };
        match self.kind {
            Kind::Memory if self.url.is_some() => Err((
                "url",
                "a Redis `url` with the \"memory\" kind would be ignored; set `kind = \"redis\"` or `\"tiered\"`".into(),
            )),
            Kind::Memory => Ok(Backend::Memory),
            Kind::Redis => Ok(Backend::Redis { url: url()? }),
            Kind::Tiered => Ok(Backend::Tiered { url: url()? }),
        }
    }
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Redis => "redis",
            Kind::Tiered => "tiered",
        }
    }
}
