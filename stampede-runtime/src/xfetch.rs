//! XFetch, probabilistic early expiration (Vattani, Chierichetti, Lowenstein, VLDB 2015).
//!
//! A caller refreshes early when `now - δ·β·ln(u) >= expiry`: with time-to-expiry `x` that
//! happens with probability `exp(-x / (δ·β))`, so the chance climbs as expiry nears, and
//! the slower the recompute (`δ`) the earlier it starts. XFetch only decides *when*; the
//! flight decides *who*, so a hot key still gets one refresh (ARCHITECTURE.md, decision 6).
use std::time::Duration;

/// Whether a caller should refresh a value that stops being fresh in `time_to_expiry`.
///
/// `delta` is the last recompute time in seconds, `beta` > 0 scales eagerness (1.0 is the
/// paper's optimum), and `u` is uniform in (0, 1].
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::xfetch::should_refresh_early;
/// // A 100 ms recompute ten seconds before expiry: practically never.
/// assert!(!should_refresh_early(Duration::from_secs(10), 0.1, 1.0, 0.5));
/// // At expiry: always.
/// assert!(should_refresh_early(Duration::ZERO, 0.1, 1.0, 1.0));
/// ```
pub fn should_refresh_early(time_to_expiry: Duration, delta: f64, beta: f64, u: f64) -> bool {
    let x = time_to_expiry.as_secs_f64();
    // -ln(u) >= 0 for u in (0, 1]; u = 1 gives 0, so a value at expiry always refreshes.
    delta * beta * -u.ln() >= x
}

/// A uniform draw in (0, 1]: never 0, whose logarithm is -inf.
pub(crate) fn draw_u() -> f64 {
    1.0 - fastrand::f64()
}

#[cfg(test)]
mod tests;
