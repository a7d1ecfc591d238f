//! Where values are stored: the backend kind and the shared-store settings, declared once
//! for the file's `[backend]` table and the `STAMPEDE_BACKEND` / `STAMPEDE_REDIS_*`
//! variables.
use super::values;
use serde::Deserialize;
use stampede_settings as settings;
use std::time::Duration;

/// Where values are stored. Only the embedded memory store exists yet; the file's
/// `"redis"` and `"tiered"` kinds are refused with a message saying so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// moka in this process, typed values, no serialization.
    #[default]
    Memory,
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
        // Read by the shared-store backend; today only `kind`, `url` and `nodes` decide.
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
    /// While no shared store exists, the settings that need one are refused here, so
    /// they are parsed and checked like any other but never silently ignored.
    pub(crate) fn available(&self) -> Result<Backend, (&'static str, String)> {
        let unavailable = |key, what: &str| {
            Err((
                key,
                format!("{what} arrives with the shared-store backend; it is not available in this version (only the \"memory\" kind is)"),
            ))
        };
        match self.kind {
            Kind::Redis => unavailable("kind", "backend kind `redis`"),
            Kind::Tiered => unavailable("kind", "backend kind `tiered`"),
            Kind::Memory if self.url.is_some() => unavailable("url", "a Redis `url`"),
            Kind::Memory if !self.nodes.is_empty() => unavailable("nodes", "Redis Cluster `nodes`"),
            Kind::Memory => Ok(Backend::Memory),
        }
    }
}
