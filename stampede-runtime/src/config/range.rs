//! The ranges a configured number must fall in, shared by the file and the environment so
//! both refuse the same values with the same words.
use std::time::Duration;

/// The largest admission limit accepted: far above any sane origin concurrency, far below
/// what Tokio's semaphore can count.
pub(crate) const MAX_LIMIT: usize = 1_000_000;

pub(crate) fn limit(limit: i64) -> Result<usize, String> {
    match usize::try_from(limit) {
        Ok(limit @ 1..=MAX_LIMIT) => Ok(limit),
        _ => Err(format!(
            "{limit} is out of range: a limit is a whole number from 1 to {MAX_LIMIT}"
        )),
    }
}

pub(crate) fn capacity(capacity: i64) -> Result<u64, String> {
    match u64::try_from(capacity) {
        Ok(capacity @ 1..) => Ok(capacity),
        _ => Err(format!(
            "{capacity} is out of range: a capacity is a whole number of entries, at least 1"
        )),
    }
}

pub(crate) fn jitter(jitter: f64) -> Result<f64, String> {
    if (0.0..=0.5).contains(&jitter) {
        Ok(jitter)
    } else {
        Err(format!(
            "{jitter} is out of range: jitter is a fraction from 0.0 to 0.5"
        ))
    }
}

pub(crate) fn beta(beta: f64) -> Result<f64, String> {
    if beta.is_finite() && beta > 0.0 {
        Ok(beta)
    } else {
        Err(format!(
            "{beta} is out of range: xfetch_beta is a finite number above zero (1.0 is the usual choice)"
        ))
    }
}

pub(crate) fn non_zero(duration: Duration) -> Result<Duration, String> {
    if duration.is_zero() {
        Err("must be greater than zero".to_owned())
    } else {
        Ok(duration)
    }
}
