//! A failed load's error on its way to each caller of that load.
//!
//! Every caller of a failed load gets an error of its own, but the errors origins return
//! (`sqlx::Error`, `anyhow::Error`, `io::Error`) are often not `Clone`. So a load keeps its
//! origin's error behind an `Arc` ([`Failure`]) and each caller's `E` is made from it:
//!
//! - `E: Clone`: a clone.
//! - otherwise, the original itself for the caller whose call ran the origin (inline mode,
//!   a plain `fn`), when no other caller of the load is left to share it; every other
//!   caller gets `E::from(stampede::Error::Origin(..))`, which prints as the original does
//!   and gives it back through [`Error::origin_error`]. A detached load runs in a task of
//!   its own, so no caller ran it: each gets the wrapped form.
//!
//! stampede's own failures (a timeout, an overloaded admission) are `stampede::Error`,
//! which is `Clone`: each caller gets its own `E::from(error)`, whatever `E` is.
use crate::error::{Error, OriginError};
use std::fmt;
use std::sync::Arc;

/// What a failed load hands its callers: the origin's error behind an `Arc`, or stampede's
/// own failure. The error type of the caches `#[cached]` builds; each caller turns it into
/// its `E` with [`Answer`].
#[doc(hidden)]
pub enum Failure<E> {
    /// The origin's error.
    Origin(Arc<E>),
    /// stampede's own failure.
    Cache(Error),
}

impl<E> Failure<E> {
    /// An origin's error.
    pub fn origin(error: E) -> Self {
        Failure::Origin(Arc::new(error))
    }

    /// stampede's own failure (the cache's `map_error`).
    pub fn cache(error: Error) -> Self {
        Failure::Cache(error)
    }

    /// Whether this is an origin's error that `keep` accepts (negative caching chooses
    /// among the origin's errors only, never stampede's own).
    pub fn origin_is(&self, keep: fn(&E) -> bool) -> bool {
        matches!(self, Failure::Origin(error) if keep(error))
    }
}

impl<E> Clone for Failure<E> {
    fn clone(&self) -> Self {
        match self {
            Failure::Origin(error) => Failure::Origin(error.clone()),
            Failure::Cache(error) => Failure::Cache(error.clone()),
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Origin(error) => f.debug_tuple("Origin").field(error).finish(),
            Failure::Cache(error) => f.debug_tuple("Cache").field(error).finish(),
        }
    }
}

/// Makes one caller's `E` from a [`Failure`]. The attribute calls `answer` on
/// `&&Answer<E>`: the compiler picks [`AnswerByClone`] when `E: Clone` and
/// [`AnswerByShare`] otherwise.
#[doc(hidden)]
pub struct Answer<E> {
    map_error: fn(Error) -> E,
    /// This caller's call ran the origin (inline mode, a plain `fn`), so it may have the
    /// original when no other caller holds it.
    ran_origin: bool,
}

impl<E> Answer<E> {
    /// How stampede's failures become an `E`, and whether the caller ran the origin.
    pub fn new(map_error: fn(Error) -> E, ran_origin: bool) -> Self {
        Answer {
            map_error,
            ran_origin,
        }
    }
}

/// The answer for errors that are `Clone`: every caller gets the same error.
#[doc(hidden)]
pub trait AnswerByClone<E> {
    /// This caller's error.
    fn answer(&self, failure: Failure<E>) -> E;
}

impl<E: Clone> AnswerByClone<E> for &Answer<E> {
    fn answer(&self, failure: Failure<E>) -> E {
        match failure {
            Failure::Cache(error) => (self.map_error)(error),
            Failure::Origin(error) => {
                Arc::try_unwrap(error).unwrap_or_else(|error| (*error).clone())
            }
        }
    }
}

/// The answer for errors that are not `Clone`: the original for the one caller that ran
/// the origin and is its only holder, the wrapped form for everyone else.
#[doc(hidden)]
pub trait AnswerByShare<E> {
    /// This caller's error.
    fn answer(&self, failure: Failure<E>) -> E
    where
        E: ShareableError;
}

impl<E> AnswerByShare<E> for Answer<E> {
    fn answer(&self, failure: Failure<E>) -> E
    where
        E: ShareableError,
    {
        let error = match failure {
            Failure::Cache(error) => return (self.map_error)(error),
            Failure::Origin(error) if self.ran_origin => match Arc::try_unwrap(error) {
                Ok(original) => return original,
                Err(shared) => shared,
            },
            Failure::Origin(error) => error,
        };
        (self.map_error)(Error::Origin(OriginError::new(error)))
    }
}

/// An origin error that is not `Clone`, which the callers of a failed load share.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Clone`, so the callers of a failed load share it, and it must print: `Display + Debug + Send + Sync + 'static`",
    label = "this function fails with `{Self}`",
    note = "every other caller of a failed load gets `stampede::Error::Origin`, which prints as the original and gives it back (`origin_error::<{Self}>()`); implement `Display` for `{Self}`, or derive `Clone`"
)]
pub trait ShareableError: fmt::Display + fmt::Debug + Send + Sync + 'static {}
impl<E: fmt::Display + fmt::Debug + Send + Sync + 'static> ShareableError for E {}

#[cfg(test)]
mod tests;
