//! The range of every numeric setting, in one place, and the words that refuse a value
//! outside it. Each check takes the setting's name as its caller spells it.
use std::time::Duration;

/// The longest any deadline a policy derives may reach: a century, which is "forever"
/// for a cache and far inside what clocks and moka's time-to-live can represent.
pub const HORIZON: Duration = Duration::from_secs(36_500 * 24 * 60 * 60);
/// [`HORIZON`] as a duration is written.
pub const HORIZON_TEXT: &str = "36500d";
/// The largest ± fraction of `fresh` that jitter may draw.
pub const MAX_JITTER: f64 = 0.5;
/// The most entries one cache may hold in memory.
pub const MAX_CAPACITY: u64 = 1_000_000_000;
/// The largest admission limit: far above any sane origin concurrency, far below what
/// Tokio's semaphore can count.
pub const MAX_LIMIT: u64 = 1_000_000;

/// A duration above zero and within [`HORIZON`] (`fresh`, `timeout`, `lease`, …).
pub fn positive(name: &str, duration: Duration) -> Result<Duration, String> {
    if duration.is_zero() {
        return Err(format!("{name} must be greater than zero"));
    }
    within_horizon(name, duration)
}

/// A duration within [`HORIZON`]; zero is allowed (`stale = "0s"` turns the window off).
pub fn within_horizon(name: &str, duration: Duration) -> Result<Duration, String> {
    if duration > HORIZON {
        return Err(format!("{name} must be at most {HORIZON_TEXT}"));
    }
    Ok(duration)
}

/// The longest a value is kept, `fresh × (1 + jitter)` plus the longer of the stale and
/// stale-if-error windows, must stay within [`HORIZON`]: every deadline is derived from it.
pub fn horizon(
    fresh: Duration,
    jitter: f64,
    stale: Duration,
    stale_if_error: Duration,
) -> Result<(), String> {
    let longest_fresh = fresh.as_secs_f64() * (1.0 + jitter.clamp(0.0, MAX_JITTER));
    let kept = longest_fresh + stale.max(stale_if_error).as_secs_f64();
    if kept > HORIZON.as_secs_f64() {
        return Err(format!(
            "fresh × (1 + jitter) plus the longer of stale and stale_if_error must be at most {HORIZON_TEXT}"
        ));
    }
    Ok(())
}

/// A fraction of `fresh`, `0.0..=MAX_JITTER`.
pub fn jitter(name: &str, jitter: f64) -> Result<f64, String> {
    if (0.0..=MAX_JITTER).contains(&jitter) {
        Ok(jitter)
    } else {
        Err(format!(
            "{name} must be a fraction of fresh from 0.0 to {MAX_JITTER:.1} (0.15 means ±15 %), not {jitter}"
        ))
    }
}

/// XFetch's β: finite and above zero.
pub fn xfetch_beta(name: &str, beta: f64) -> Result<f64, String> {
    if beta.is_finite() && beta > 0.0 {
        Ok(beta)
    } else {
        Err(format!(
            "{name} must be a finite number above zero (1.0 is the usual choice), not {beta}"
        ))
    }
}

/// In-memory entries, `1..=MAX_CAPACITY`.
pub fn capacity(name: &str, capacity: u64) -> Result<u64, String> {
    match capacity {
        0 => Err(format!("{name} must be at least 1")),
        1..=MAX_CAPACITY => Ok(capacity),
        _ => Err(format!("{name} must be at most {MAX_CAPACITY}")),
    }
}

/// Origin calls at once through one admission semaphore, `1..=MAX_LIMIT`.
pub fn admission_limit(name: &str, limit: u64) -> Result<u64, String> {
    match limit {
        0 => Err(format!("{name} must be at least 1")),
        1..=MAX_LIMIT => Ok(limit),
        _ => Err(format!("{name} must be at most {MAX_LIMIT}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_values_are_refused_with_the_bound() {
        assert_eq!(
            capacity("capacity", 0).unwrap_err(),
            "capacity must be at least 1"
        );
        assert_eq!(
            capacity("capacity", u64::MAX).unwrap_err(),
            "capacity must be at most 1000000000"
        );
        assert_eq!(
            admission_limit("limit", 1_000_001).unwrap_err(),
            "limit must be at most 1000000"
        );
        assert!(jitter("jitter", 0.6)
            .unwrap_err()
            .starts_with("jitter must be a fraction"));
        assert!(jitter("jitter", f64::NAN).is_err());
        assert!(xfetch_beta("beta", 0.0).is_err() && xfetch_beta("beta", f64::INFINITY).is_err());
        assert_eq!(
            positive("fresh", Duration::ZERO).unwrap_err(),
            "fresh must be greater than zero"
        );
        assert_eq!(
            within_horizon("stale", Duration::MAX).unwrap_err(),
            "stale must be at most 36500d"
        );
    }

    #[test]
    fn the_kept_horizon_counts_jitter_and_the_longer_window() {
        let day = Duration::from_secs(86_400);
        assert!(horizon(day * 20_000, 0.5, day * 6_500, Duration::ZERO).is_ok());
        assert!(horizon(day * 20_000, 0.5, Duration::ZERO, day * 6_501).is_err());
        assert!(horizon(HORIZON, 0.0, Duration::ZERO, Duration::ZERO).is_ok());
        assert!(horizon(HORIZON, 0.1, Duration::ZERO, Duration::ZERO).is_err());
    }
}
