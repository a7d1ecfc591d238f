//! Per-function overrides: settings that replace a compiled policy's, by cache name.
//!
//! Each setting is declared once, below: its doc line, its type, how it is checked and
//! which [`PolicyBuilder`] setter applies it. The file (`[functions."<name>"]`), the
//! environment (`STAMPEDE_FUNCTION_<NAME>_<KEY>`) and the code builder all read this one
//! declaration.
use super::values;
use crate::policy::PolicyBuilder;
use crate::policy::{Consistency, Priority};
use crate::xfetch::XFetch;
use stampede_settings as settings;
use std::time::Duration;

/// Declares the overridable settings: the serde model (one optional field each), the
/// builder setters, and how a set field is checked, merged and applied to a policy.
macro_rules! overrides {
    ($(
        $(#[doc = $doc:literal])*
        $(#[serde($($serde:tt)*)])?
        $field:ident $(or $alias:literal)?: $ty:ty $(as $param:ty)?, check $check:path, apply $setter:ident;
    )*) => {
        table! {
            /// Settings that replace a policy's own for the cache of that name (the
            /// attribute's `name`), without recompiling. Unset settings keep the policy's value.
            ///
            /// ```
            /// use std::time::Duration;
            /// use stampede_runtime::{Overrides, Runtime};
            /// let runtime = Runtime::builder()
            ///     .function("user-profile", Overrides::new().fresh(Duration::from_secs(30)))
            ///     .build()
            ///     .unwrap();
            /// ```
            pub struct Overrides {$(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])?
                $field $(or $alias)?: $ty,
            )*}
        }

        impl Overrides {
            $(
                $(#[doc = $doc])*
                pub fn $field(mut self, value: overrides!(@param $ty $(, $param)?)) -> Self {
                    self.$field = Some(value.into());
                    self
                }
            )*

            /// Each set value in its range: the key at fault and why.
            pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
                $(if let Some(value) = &self.$field {
                    $check(stringify!($field), value.clone()).map_err(|why| (stringify!($field), why))?;
                })*
                Ok(())
            }

            pub(crate) fn apply(&self, mut policy: PolicyBuilder) -> PolicyBuilder {
                $(if let Some(value) = &self.$field {
                    policy = policy.$setter(value.clone());
                })*
                policy
            }
        }
    };
    (@param $ty:ty) => { $ty };
    (@param $ty:ty, $param:ty) => { $param };
}

overrides! {
    /// How long a value is fresh (above zero).
    #[serde(deserialize_with = "values::duration")]
    fresh: Duration, check settings::positive, apply fresh;
    /// The serve-stale window after `fresh`.
    #[serde(deserialize_with = "values::duration")]
    stale: Duration, check settings::within_horizon, apply stale;
    /// How long after `fresh` the last value stands in for a failing or shed load.
    #[serde(deserialize_with = "values::duration")]
    stale_if_error: Duration, check settings::within_horizon, apply stale_if_error;
    /// While the origin fails, how long a served fallback counts as fresh.
    #[serde(deserialize_with = "values::duration")]
    fail_safe_throttle: Duration, check settings::positive, apply fail_safe_throttle;
    /// ± fraction of `fresh`, `0.0..=0.5`.
    jitter: f64, check settings::jitter, apply jitter;
    /// XFetch early refresh: `true` (β = 1.0), `false` (off), or β itself (above zero,
    /// 1.0 the usual choice; 0 is off), as [`PolicyBuilder::xfetch`] takes it. The file
    /// and the environment also spell it `xfetch_beta`.
    #[serde(deserialize_with = "values::xfetch")]
    xfetch or "xfetch_beta": XFetch as impl Into<XFetch>, check xfetch, apply xfetch;
    /// The per-caller deadline on a miss (above zero).
    #[serde(deserialize_with = "values::duration")]
    timeout: Duration, check settings::positive, apply timeout;
    /// The deadline of the origin call itself (above zero): past it the load is
    /// abandoned, its lease and permit given back.
    #[serde(deserialize_with = "values::duration")]
    load_timeout: Duration, check settings::positive, apply load_timeout;
    /// Whether concurrent misses of one key share one origin call.
    coalesce: bool, check any, apply coalesce;
    /// The fleet lease TTL on shared stores (above zero).
    #[serde(deserialize_with = "values::duration")]
    lease: Duration, check settings::positive, apply lease;
    /// In-memory entries, `1..=1_000_000_000`.
    #[serde(deserialize_with = "values::count")]
    capacity: u64, check settings::capacity, apply capacity;
    /// Keys counted for `hot_keys()`, `0..=1_024` (0: none).
    #[serde(deserialize_with = "values::count")]
    hot_keys: usize, check hot_keys, apply hot_keys;
    /// Keys per origin call of a batch load, `1..=100_000`.
    #[serde(deserialize_with = "values::count")]
    max_batch: usize, check max_batch, apply max_batch;
    /// How long a batch load gathers keys (above zero, at most 1s).
    #[serde(deserialize_with = "values::duration")]
    batch_window: Duration, check settings::batch_window, apply batch_window;
    /// `false` makes every call run the origin directly (see [`PolicyBuilder::enabled`]).
    enabled: bool, check any, apply enabled;
    /// The admission semaphore the function's loads go through.
    admission: String as impl Into<String>, check named, apply admission;
    /// How much the function's origin calls matter when permits are short: `"low"`,
    /// `"normal"` or `"high"` (see [`Priority`](crate::Priority)).
    priority: Priority, check any, apply priority;
    /// What the function's invalidations and inserts wait for: `"eventual"` (default) or
    /// `"acknowledged"` (see [`Consistency`](crate::Consistency)).
    consistency: Consistency, check any, apply consistency;
}

fn xfetch(key: &str, xfetch: XFetch) -> Result<XFetch, String> {
    xfetch.checked_beta(key).map(|_| xfetch)
}

fn hot_keys(key: &str, keys: usize) -> Result<usize, String> {
    settings::hot_keys(key, keys as u64).map(|_| keys)
}

fn max_batch(key: &str, keys: usize) -> Result<usize, String> {
    settings::max_batch(key, keys as u64).map(|_| keys)
}

/// A setting with no range of its own.
fn any<T>(_: &str, value: T) -> Result<T, String> {
    Ok(value)
}

fn named(key: &str, name: String) -> Result<String, String> {
    if name.trim().is_empty() {
        return Err(format!("the {key} name must not be empty"));
    }
    Ok(name)
}

impl Overrides {
    /// Overrides nothing.
    pub fn new() -> Self {
        Overrides::default()
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}
