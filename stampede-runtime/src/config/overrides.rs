//! Per-function overrides: settings that replace a compiled policy's, by cache name.
use crate::policy::PolicyBuilder;
use std::sync::Arc;
use std::time::Duration;

/// Settings that replace a policy's own for the cache of that name (the attribute's
/// `name`), without recompiling. Unset settings keep the policy's value.
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{Overrides, Runtime};
/// let runtime = Runtime::builder()
///     .function("user-profile", Overrides::new().fresh(Duration::from_secs(30)))
///     .build()
///     .unwrap();
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub(crate) fresh: Option<Duration>,
    pub(crate) stale: Option<Duration>,
    pub(crate) stale_if_error: Option<Duration>,
    pub(crate) jitter: Option<f64>,
    pub(crate) xfetch_beta: Option<f64>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) capacity: Option<u64>,
    pub(crate) enabled: Option<bool>,
    pub(crate) admission: Option<Arc<str>>,
}

impl Overrides {
    /// Overrides nothing.
    pub fn new() -> Self {
        Overrides::default()
    }
    /// How long a value is fresh.
    pub fn fresh(mut self, fresh: Duration) -> Self {
        self.fresh = Some(fresh);
        self
    }
    /// The serve-stale window after `fresh`.
    pub fn stale(mut self, stale: Duration) -> Self {
        self.stale = Some(stale);
        self
    }
    /// How long after `fresh` the last value stands in for a failing or shed load.
    pub fn stale_if_error(mut self, bound: Duration) -> Self {
        self.stale_if_error = Some(bound);
        self
    }
    /// ± fraction of `fresh`, `0.0..=0.5`.
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = Some(fraction);
        self
    }
    /// Turns XFetch on with this β.
    pub fn xfetch_beta(mut self, beta: f64) -> Self {
        self.xfetch_beta = Some(beta);
        self
    }
    /// The per-caller deadline on a miss.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// In-memory entries.
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.capacity = Some(capacity);
        self
    }
    /// `false` makes every call run the origin directly (see [`PolicyBuilder::enabled`]).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = Some(enabled);
        self
    }
    /// The admission semaphore the function's loads go through.
    pub fn admission(mut self, name: impl Into<Arc<str>>) -> Self {
        self.admission = Some(name.into());
        self
    }

    pub(super) fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }

    /// Takes every setting `later` sets.
    pub(super) fn merge(&mut self, later: &Overrides) {
        let Overrides {
            fresh,
            stale,
            stale_if_error,
            jitter,
            xfetch_beta,
            timeout,
            capacity,
            enabled,
            admission,
        } = later;
        self.fresh = fresh.or(self.fresh);
        self.stale = stale.or(self.stale);
        self.stale_if_error = stale_if_error.or(self.stale_if_error);
        self.jitter = jitter.or(self.jitter);
        self.xfetch_beta = xfetch_beta.or(self.xfetch_beta);
        self.timeout = timeout.or(self.timeout);
        self.capacity = capacity.or(self.capacity);
        self.enabled = enabled.or(self.enabled);
        if admission.is_some() {
            self.admission.clone_from(admission);
        }
    }

    pub(super) fn apply(&self, mut policy: PolicyBuilder) -> PolicyBuilder {
        if let Some(fresh) = self.fresh {
            policy = policy.fresh(fresh);
        }
        if let Some(stale) = self.stale {
            policy = policy.stale(stale);
        }
        if let Some(bound) = self.stale_if_error {
            policy = policy.stale_if_error(bound);
        }
        if let Some(jitter) = self.jitter {
            policy = policy.jitter(jitter);
        }
        if let Some(beta) = self.xfetch_beta {
            policy = policy.xfetch(beta);
        }
        if let Some(timeout) = self.timeout {
            policy = policy.timeout(timeout);
        }
        if let Some(capacity) = self.capacity {
            policy = policy.capacity(capacity);
        }
        if let Some(enabled) = self.enabled {
            policy = policy.enabled(enabled);
        }
        if let Some(admission) = &self.admission {
            policy = policy.admission(admission.clone());
        }
        policy
    }
}
