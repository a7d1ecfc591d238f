//! The circuit breaker in front of Redis.
//!
//! After `failures` consecutive failed calls it opens: every call fails at once without
//! touching Redis, so a dead or black-holed server costs callers nothing but the memory
//! path. After `cooldown` one call (usually the heartbeat's PING) is let through as a
//! probe; its success closes the breaker, its failure opens it for another cooldown.
use crate::store::shared::BreakerState;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(crate) struct Breaker {
    failures: u32,
    cooldown: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: BreakerState,
    consecutive_failures: u32,
    /// When it last opened; the probe waits `cooldown` from here.
    opened_at: Option<Instant>,
    /// When it left `Closed`, for the time spent degraded.
    degraded_since: Option<Instant>,
    degraded_total: Duration,
    opened: u64,
}

/// A call the breaker let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    Closed,
    /// The one call allowed while half-open; its outcome decides the state.
    Probe,
}

impl Breaker {
    pub(crate) fn new(failures: u32, cooldown: Duration) -> Self {
        Self {
            failures: failures.max(1),
            cooldown,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update leaves the state consistent, so a panic elsewhere cannot corrupt it.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `None`: fail fast without touching Redis.
    pub(crate) fn pass(&self) -> Option<Pass> {
        let mut inner = self.lock();
        match inner.state {
            BreakerState::Closed => Some(Pass::Closed),
            BreakerState::HalfOpen => None,
            BreakerState::Open => {
                let cooled = inner
                    .opened_at
                    .is_none_or(|at| at.elapsed() >= self.cooldown);
                cooled.then(|| {
                    inner.state = BreakerState::HalfOpen;
                    Pass::Probe
                })
            }
        }
    }

    pub(crate) fn succeeded(&self, pass: Pass) {
        let mut inner = self.lock();
        inner.consecutive_failures = 0;
        if pass == Pass::Probe || inner.state != BreakerState::Closed {
            inner.state = BreakerState::Closed;
            if let Some(since) = inner.degraded_since.take() {
                inner.degraded_total += since.elapsed();
            }
        }
    }

    pub(crate) fn failed(&self, pass: Pass) {
        let mut inner = self.lock();
        inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
        let trips = match pass {
            Pass::Probe => true,
            Pass::Closed => {
                inner.state == BreakerState::Closed && inner.consecutive_failures >= self.failures
            }
        };
        if trips {
            if inner.state == BreakerState::Closed {
                inner.opened += 1;
                inner.degraded_since = Some(Instant::now());
            }
            inner.state = BreakerState::Open;
            inner.opened_at = Some(Instant::now());
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// How often it opened, and the total time it spent open or half-open.
    pub(crate) fn degraded(&self) -> (u64, Duration) {
        let inner = self.lock();
        let current = inner
            .degraded_since
            .map_or(Duration::ZERO, |since| since.elapsed());
        (inner.opened, inner.degraded_total + current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_only() {
        let breaker = Breaker::new(3, Duration::from_secs(60));
        for _ in 0..2 {
            let pass = breaker.pass().unwrap();
            breaker.failed(pass);
        }
        breaker.succeeded(breaker.pass().unwrap());
        for _ in 0..2 {
            breaker.failed(breaker.pass().unwrap());
        }
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.failed(breaker.pass().unwrap());
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.pass(), None);
        assert_eq!(breaker.degraded().0, 1);
    }

    #[test]
    fn one_probe_after_the_cooldown_decides() {
        let breaker = Breaker::new(1, Duration::ZERO);
        breaker.failed(breaker.pass().unwrap());
        assert_eq!(breaker.pass(), Some(Pass::Probe));
        assert_eq!(breaker.pass(), None, "only one probe at a time");
        breaker.failed(Pass::Probe);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.pass(), Some(Pass::Probe));
        breaker.succeeded(Pass::Probe);
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(breaker.pass(), Some(Pass::Closed));
        assert_eq!(
            breaker.degraded().0,
            1,
            "a failed probe does not count a new opening"
        );
    }
}
