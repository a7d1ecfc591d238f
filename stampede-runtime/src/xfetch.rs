//! XFetch, probabilistic early expiration (Vattani, Chierichetti, Lowenstein, VLDB 2015).
//!
//! A caller refreshes early when `now - δ·β·ln(u) >= expiry`: with time-to-expiry `x` that
//! happens with probability `exp(-x / (δ·β))`, so the chance climbs as expiry nears, and
//! the slower the recompute (`δ`) the earlier it starts. XFetch only decides *when*; the
//! flight decides *who*, so a hot key still gets one refresh (ARCHITECTURE.md, rules: flights).
use std::time::Duration;

/// Whether a fresh hit may refresh its key before it expires, and how eagerly: what
/// [`PolicyBuilder::xfetch`](crate::PolicyBuilder::xfetch) and
/// [`Overrides::xfetch`](crate::Overrides::xfetch) take, and the runtime file's `xfetch`
/// key. `true` is β = 1.0 (the paper's optimum, and the attribute's bare `xfetch`);
/// `false` and a β of 0 turn it off (at β = 0 no refresh is ever early); any other number
/// is β itself: finite, above zero, larger refreshing earlier.
///
/// ```
/// use stampede_runtime::XFetch;
/// assert_eq!(XFetch::from(true), XFetch::Beta(1.0));
/// assert_eq!(XFetch::from(false), XFetch::Off);
/// assert_eq!(XFetch::from(0.0), XFetch::Off);
/// assert_eq!(XFetch::from(2.5), XFetch::Beta(2.5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum XFetch {
    /// No early refresh: a value is refreshed once it stops being fresh.
    Off,
    /// Early refresh with this β (a β of 0 is [`XFetch::Off`]).
    Beta(f64),
}

impl From<bool> for XFetch {
    fn from(on: bool) -> Self {
        if on {
            XFetch::Beta(1.0)
        } else {
            XFetch::Off
        }
    }
}

impl From<f64> for XFetch {
    fn from(beta: f64) -> Self {
        if beta == 0.0 {
            XFetch::Off
        } else {
            XFetch::Beta(beta)
        }
    }
}

impl XFetch {
    /// β when it is on, checked (finite, at least zero; zero is off); `name` is the setting
    /// as its caller spells it, for the refusal.
    pub(crate) fn checked_beta(self, name: &str) -> Result<Option<f64>, String> {
        match self {
            XFetch::Off => Ok(None),
            XFetch::Beta(beta) => stampede_settings::xfetch_beta(name, beta),
        }
    }
}

/// Whether a caller should refresh a value that stops being fresh in `time_to_expiry`.
///
/// `delta` is the last recompute time in seconds, `beta` > 0 scales eagerness (1.0 is the
/// paper's optimum), and `u` is uniform in (0, 1]. A 100 ms recompute ten seconds before
/// expiry practically never refreshes; at expiry it always does (`xfetch/tests.rs`).
pub(crate) fn should_refresh_early(
    time_to_expiry: Duration,
    delta: f64,
    beta: f64,
    u: f64,
) -> bool {
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
