//! A failed load's error on its way to each caller of that load.
//!
//! Every caller of a failed load gets an error of its own, but the errors origins return
//! (`sqlx::Error`, `anyhow::Error`, `io::Error`) are often not `Clone`. So a load keeps its
//! origin's error behind an `Arc` ([`Failure`]) and each caller's `E` is made from it:
//!
//! - `E: Clone`: a clone.
//! - otherwise, the original itself for the caller whose call ran the origin (inline mode,
//!   a plain `fn`), when no other caller of the load is left to share it; every other
//!   caller gets `E::from(stampede::Error::Shared(..))`, which prints as the original does
//!   and gives it back through [`Error::origin_error`]. A detached load runs in a task of
//!   its own, so no caller ran it: each gets the shared form.
//!
//! stampede's own failures (a timeout, an overloaded admission) are `stampede::Error`,
//! which is `Clone`: each caller gets its own `E::from(error)`, whatever `E` is.
use crate::error::Error;
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// An origin's error shared by the callers of one failed load ([`Error::Shared`]): the
/// original behind an `Arc`, printed as the original prints.
#[derive(Clone)]
pub struct OriginError(Arc<dyn Origin>);

/// What the shared form needs of the original: to print it, and to give it back.
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
    /// The shared form of `error`.
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

/// Two shared forms are equal when they share one original.
impl PartialEq for OriginError {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for OriginError {}

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
/// the origin and is its only holder, the shared form for everyone else.
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
        (self.map_error)(Error::Shared(OriginError::new(error)))
    }
}

/// An origin error that is not `Clone`, which the callers of a failed load share.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `Clone`, so the callers of a failed load share it, and it must print: `Display + Debug + Send + Sync + 'static`",
    label = "this function fails with `{Self}`",
    note = "every other caller of a failed load gets `stampede::Error::Shared`, which prints as the original and gives it back (`origin_error::<{Self}>()`); implement `Display` for `{Self}`, or derive `Clone`"
)]
pub trait ShareableError: fmt::Display + fmt::Debug + Send + Sync + 'static {}
impl<E: fmt::Display + fmt::Debug + Send + Sync + 'static> ShareableError for E {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct NotClone(u32);

    impl fmt::Display for NotClone {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "row {} is gone", self.0)
        }
    }

    #[derive(Debug)]
    enum AppError {
        Db(NotClone),
        Cache(Error),
    }

    impl fmt::Display for AppError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                AppError::Db(error) => error.fmt(f),
                AppError::Cache(error) => error.fmt(f),
            }
        }
    }

    impl From<Error> for AppError {
        fn from(error: Error) -> Self {
            AppError::Cache(error)
        }
    }

    /// The answer the attribute picks for an error that is not `Clone`.
    fn shared_answer<E: ShareableError>(answer: &Answer<E>, failure: Failure<E>) -> E {
        AnswerByShare::answer(answer, failure)
    }

    #[test]
    fn the_only_holder_that_ran_the_origin_gets_the_original() {
        let answer = Answer::new(AppError::from, true);
        let got = shared_answer(&answer, Failure::origin(AppError::Db(NotClone(7))));
        assert!(matches!(got, AppError::Db(NotClone(7))));
    }

    #[test]
    fn another_holder_gets_the_shared_form_of_the_same_original() {
        let answer = Answer::new(AppError::from, true);
        let failure = Failure::origin(AppError::Db(NotClone(7)));
        let kept = failure.clone();
        let AppError::Cache(shared) = shared_answer(&answer, failure) else {
            panic!("a second holder exists, so this caller cannot have the original");
        };
        assert!(matches!(
            shared.origin_error::<AppError>(),
            Some(AppError::Db(NotClone(7)))
        ));
        assert_eq!(shared.to_string(), "row 7 is gone");
        let Failure::Origin(kept) = kept else {
            unreachable!()
        };
        assert!(std::ptr::eq(
            shared.origin_error::<AppError>().unwrap(),
            &*kept
        ));
    }

    #[test]
    fn a_caller_that_did_not_run_the_origin_gets_the_shared_form() {
        let answer = Answer::new(AppError::from, false);
        let got = shared_answer(&answer, Failure::origin(AppError::Db(NotClone(1))));
        assert!(matches!(got, AppError::Cache(Error::Shared(_))));
    }

    #[test]
    fn stampedes_own_failures_reach_each_caller_as_themselves() {
        let answer = Answer::new(AppError::from, false);
        let timeout = Error::Timeout {
            cache: "c".into(),
            after: std::time::Duration::from_millis(5),
        };
        let got = shared_answer(&answer, Failure::cache(timeout.clone()));
        assert!(matches!(got, AppError::Cache(error) if error == timeout));
    }

    #[test]
    fn clone_errors_are_cloned() {
        let answer = Answer::new(|_| "cache".to_string(), false);
        let failure = Failure::origin("db down".to_string());
        let kept = failure.clone();
        assert_eq!((&&answer).answer(failure), "db down");
        assert_eq!((&&answer).answer(kept), "db down");
    }
}
