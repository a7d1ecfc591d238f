//! Failures the framework itself causes. Errors of the origin are the caller's own type.
use crate::config::ConfigError;
use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A failure caused by stampede, not by the origin.
///
/// Fallible cached functions receive it as `E::from(stampede::Error)` (or through
/// `map_error`), so a caller can tell a slow or broken cache from a broken database.
///
/// ```
/// use std::time::Duration;
/// let err = stampede_runtime::Error::Timeout { cache: "user-profile".into(), after: Duration::from_millis(250) };
/// assert_eq!(err.to_string(), "cache `user-profile`: no value within the caller's deadline of 250ms");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The caller's deadline passed before a value was ready. In detached mode the shared
    /// origin call goes on and still fills the cache.
    Timeout {
        /// The cache's name.
        cache: Arc<str>,
        /// The deadline that passed.
        after: Duration,
    },
    /// The origin call ran past the policy's `load_timeout` and was abandoned: its future
    /// dropped, its lease and admission permit given back. Every waiter of that load gets
    /// this error unless a stale or fail-safe value stands in; the next call loads anew.
    LoadTimeout {
        /// The cache's name.
        cache: Arc<str>,
        /// The origin call's deadline.
        after: Duration,
    },
    /// The origin panicked inside a detached flight; every waiter of that flight gets this
    /// error, and the next call starts a new flight.
    OriginPanicked {
        /// The cache's name.
        cache: Arc<str>,
    },
    /// The task running a detached flight was cancelled before it finished, which happens
    /// when the async runtime shuts down under it.
    Aborted {
        /// The cache's name.
        cache: Arc<str>,
    },
    /// The load waited `queue_timeout` for a permit of its admission semaphore and was
    /// shed (or, of low priority, found the queue at its `low_queue` and was shed at once,
    /// `waited` near zero), and no stale value could stand in. Every waiter of that load gets
    /// this error.
    Overloaded {
        /// The cache's name.
        cache: Arc<str>,
        /// The admission semaphore that was full.
        admission: Arc<str>,
        /// How long the load queued before it was shed.
        waited: Duration,
    },
    /// The cache names an admission semaphore (`admission = "…"`) that its runtime does not
    /// define; no load of it runs until the configuration defines one.
    UnknownAdmission {
        /// The cache's name.
        cache: Arc<str>,
        /// The name no `[admission.…]` table defines.
        admission: Arc<str>,
    },
    /// The origin of a load awaited the same cache and key again, directly or through other
    /// cached calls: it would wait for itself forever, so that inner call fails instead.
    Recursive {
        /// The cache's name.
        cache: Arc<str>,
    },
    /// Another cache of the same runtime already has this name, so the two would address
    /// the same entries in a shared store; this one serves no load until one is renamed
    /// (`name = "…"`).
    DuplicateName {
        /// The name both claim.
        cache: Arc<str>,
        /// Where the first claimant is defined.
        first: Arc<str>,
    },
    /// The shared store did not take an invalidation: it applied in this process at once
    /// and waits in a queue, per key, to be replayed before this replica reads the
    /// shared store again.
    Backend {
        /// The cache's name.
        cache: Arc<str>,
        /// What failed, and what became of the request.
        message: String,
    },
    /// The runtime configuration read on first use (`STAMPEDE_CONFIG`, `STAMPEDE_*`) is
    /// invalid, so no load runs rather than one with settings nobody asked for.
    Config {
        /// The cache's name.
        cache: Arc<str>,
        /// What is wrong, and where.
        error: ConfigError,
    },
    /// The origin's error, shared by a failed load with a caller that did not get the
    /// original: an error that is not `Clone` is handed to every other caller of that
    /// load in this form, behind an `Arc`. It prints as the original does, and
    /// [`Error::origin_error`] gives the original back.
    Origin(OriginError),
}

impl Error {
    /// The origin's error of type `E`, when this is the wrapped form of one
    /// ([`Error::Origin`]).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// #[derive(Debug)]
    /// struct DbDown;
    /// impl std::fmt::Display for DbDown {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("the database is down")
    ///     }
    /// }
    /// let shared = stampede_runtime::Error::Origin(stampede_runtime::OriginError::new(Arc::new(DbDown)));
    /// assert!(shared.origin_error::<DbDown>().is_some());
    /// assert_eq!(shared.to_string(), "the database is down");
    /// ```
    pub fn origin_error<E: 'static>(&self) -> Option<&E> {
        match self {
            Error::Origin(origin) => origin.downcast_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout { cache, after } => write!(
                f,
                "cache `{cache}`: no value within the caller's deadline of {after:?}"
            ),
            Error::LoadTimeout { cache, after } => write!(
                f,
                "cache `{cache}`: the origin call ran past its `load_timeout` of {after:?} and was abandoned"
            ),
            Error::OriginPanicked { cache } => {
                write!(f, "cache `{cache}`: the origin panicked while loading")
            }
            Error::Aborted { cache } => write!(
                f,
                "cache `{cache}`: the loading task was cancelled before it finished"
            ),
            Error::Overloaded {
                cache,
                admission,
                waited,
            } => write!(
                f,
                "cache `{cache}`: shed after {waited:?} in the queue of admission `{admission}`, with no stale value to serve"
            ),
            Error::UnknownAdmission { cache, admission } => write!(
                f,
                "cache `{cache}`: admission `{admission}` is not defined by the runtime configuration (add an `[admission.{admission}]` table with a `limit`)"
            ),
            Error::Recursive { cache } => write!(
                f,
                "cache `{cache}`: a load of this key awaited the same key again, which would wait for itself forever"
            ),
            Error::DuplicateName { cache, first } => write!(
                f,
                "cache `{cache}`: the name is already used by another cache of this runtime ({first}); give one of them its own `name`"
            ),
            Error::Backend { cache, message } => {
                write!(f, "cache `{cache}`: shared store: {message}")
            }
            Error::Config { cache, error } => {
                write!(f, "cache `{cache}`: invalid stampede configuration: {error}")
            }
            // The original's words: this is the origin's error, not the cache's.
            Error::Origin(origin) => fmt::Display::fmt(origin, f),
        }
    }
}

impl std::error::Error for Error {}

/// An origin's error shared by the callers of one failed load ([`Error::Origin`]): the
/// original behind an `Arc`, printed as the original prints.
#[derive(Clone)]
pub struct OriginError(Arc<dyn Origin>);

/// What the wrapped form needs of the original: to print it, and to give it back.
trait Origin: Any + Send + Sync {
    fn display(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    fn as_any(&self) -> &dyn Any;
}

impl<E: fmt::Display + fmt::Debug + Send + Sync + 'static> Origin for E {
    fn display(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }

    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl OriginError {
    /// The wrapped form of `error`.
    pub fn new<E: fmt::Display + fmt::Debug + Send + Sync + 'static>(error: Arc<E>) -> Self {
        OriginError(error)
    }

    /// The original, when it is an `E`.
    pub fn downcast_ref<E: 'static>(&self) -> Option<&E> {
        Origin::as_any(&*self.0).downcast_ref()
    }
}

impl fmt::Display for OriginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display(f)
    }
}

impl fmt::Debug for OriginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OriginError(")?;
        self.0.debug(f)?;
        f.write_str(")")
    }
}

/// Two wrapped forms are equal when they share one original.
impl PartialEq for OriginError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for OriginError {}

#[cfg(test)]
mod tests;
