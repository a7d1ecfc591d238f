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

/// The most keys a cache's hot-key count keeps: a miss scans them when a new key enters.
pub const MAX_HOT_KEYS: u64 = 1_024;
/// The most keys one origin call of a batch load asks for.
pub const MAX_BATCH: u64 = 100_000;
/// The longest a batch load gathers keys.
pub const MAX_BATCH_WINDOW: Duration = Duration::from_secs(1);

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

/// XFetch's β: finite and above zero, or zero, which turns XFetch off (`None`): β scales
/// how far ahead of expiry a hot key may refresh, and at zero no refresh is ever early.
pub fn xfetch_beta(name: &str, beta: f64) -> Result<Option<f64>, String> {
    if beta == 0.0 {
        Ok(None)
    } else if beta.is_finite() && beta > 0.0 {
        Ok(Some(beta))
    } else {
        Err(format!(
            "{name} must be a finite number above zero (1.0 is the usual choice), or 0 to turn XFetch off, not {beta}"
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

/// Keys a cache's hot-key count keeps, `0..=MAX_HOT_KEYS` (0: none).
pub fn hot_keys(name: &str, keys: u64) -> Result<u64, String> {
    if keys <= MAX_HOT_KEYS {
        Ok(keys)
    } else {
        Err(format!(
            "{name} must be at most {MAX_HOT_KEYS} (a miss scans them when a new key enters)"
        ))
    }
}

/// Keys one origin call of a batch load asks for, `1..=MAX_BATCH`.
pub fn max_batch(name: &str, keys: u64) -> Result<u64, String> {
    match keys {
        0 => Err(format!("{name} must be at least 1")),
        1..=MAX_BATCH => Ok(keys),
        _ => Err(format!("{name} must be at most {MAX_BATCH}")),
    }
}

/// How long a batch load gathers keys before it asks the origin: above zero, at most
/// [`MAX_BATCH_WINDOW`] (every key gathered waits it out).
pub fn batch_window(name: &str, window: Duration) -> Result<Duration, String> {
    positive(name, window)?;
    if window > MAX_BATCH_WINDOW {
        return Err(format!(
            "{name} must be at most {}ms (every key it gathers waits it out)",
            MAX_BATCH_WINDOW.as_millis()
        ));
    }
    Ok(window)
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
mod tests;
