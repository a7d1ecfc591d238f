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
    assert!(matches!(got, AppError::Cache(Error::Origin(_))));
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
