//! The circuit breaker in front of Redis (one per Redis Cluster master).
//!
//! After `failures` consecutive failed calls it opens: every call fails at once without
//! touching Redis, so a dead or black-holed server costs callers nothing but the memory
//! path. After `cooldown` one call (usually the heartbeat's PING) is let through as a
//! probe; its success closes the breaker, its failure opens it for another cooldown.
//!
//! What counts as a failure: a connection that fails, or a call with no answer at all.
//! An error *reply* is Redis answering (out of memory, a script error): the server is up,
//! so it counts as a success here. A call that timed out counts only once the grace after
//! it has passed without its answer: a late answer means the server is healthy and the
//! client (starved of CPU, say) read it late, which must not put the replica into
//! degraded mode. A probe whose caller gave up on it (dropped it) is no verdict either:
//! the breaker opens again, and the next call probes at once.
//!
//! Opening is logged at warn level with its cause, recovery at info, at most once per
//! [`LOG_EVERY`] per breaker (the next message counts the openings in between).
use crate::clock::StoreInstant as Instant;
use crate::shared::store::BreakerState;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The least time between two warnings of one breaker opening.
const LOG_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub(crate) struct Breaker {
    failures: u32,
    cooldown: Duration,
    /// The master it guards (`""`: a single server, or a key whose master is not known).
    shard: String,
    circuit: Mutex<Circuit>,
}

#[derive(Debug, Default)]
struct Circuit {
    state: BreakerState,
    consecutive_failures: u32,
    /// When it last opened; the probe waits `cooldown` from here.
    opened_at: Option<Instant>,
    /// When it left `Closed`, for the time spent degraded.
    degraded_since: Option<Instant>,
    degraded_total: Duration,
    opened: u64,
    /// When an opening was last logged, and whether this degraded spell's was.
    warned_at: Option<Instant>,
    warned_this_time: bool,
    /// Openings not logged since the last warning.
    unlogged: u64,
}

/// A call the breaker let through. Report its outcome with [`Pass::succeeded`] or
/// [`Pass::failed`]; dropping it unreported (its caller gave up) leaves no verdict.
#[derive(Debug)]
pub(crate) struct Pass {
    breaker: Arc<Breaker>,
    /// The one call allowed while half-open; its outcome decides the state.
    probe: bool,
    reported: bool,
}

impl Breaker {
    pub(crate) fn new(failures: u32, cooldown: Duration, shard: String) -> Self {
        Self {
            failures: failures.max(1),
            cooldown,
            shard,
            circuit: Mutex::new(Circuit::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Circuit> {
        // Every update leaves the state consistent, so a panic elsewhere cannot corrupt it.
        self.circuit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lets the next call through as a probe if the breaker is open (the server it
    /// guards was replaced: the failures were the old one's).
    pub(crate) fn probe_now(&self) {
        let mut circuit = self.lock();
        if circuit.state == BreakerState::Open {
            circuit.opened_at = None;
        }
    }

    /// `None`: fail fast without touching Redis.
    pub(crate) fn pass(self: &Arc<Self>) -> Option<Pass> {
        let mut circuit = self.lock();
        let probe = match circuit.state {
            BreakerState::Closed => false,
            BreakerState::HalfOpen => return None,
            BreakerState::Open => {
                let cooled = circuit
                    .opened_at
                    .is_none_or(|at| at.elapsed() >= self.cooldown);
                if !cooled {
                    return None;
                }
                circuit.state = BreakerState::HalfOpen;
                true
            }
        };
        Some(Pass {
            breaker: self.clone(),
            probe,
            reported: false,
        })
    }

    fn succeeded(&self, probe: bool) {
        let mut circuit = self.lock();
        circuit.consecutive_failures = 0;
        if probe || circuit.state != BreakerState::Closed {
            circuit.state = BreakerState::Closed;
            if let Some(since) = circuit.degraded_since.take() {
                let spell = since.elapsed();
                circuit.degraded_total += spell;
                if std::mem::take(&mut circuit.warned_this_time) {
                    tracing::info!(
                        target: "stampede",
                        shard = %self.shard,
                        degraded_for = ?spell,
                        "shared store reachable again: values are shared across replicas once more"
                    );
                }
            }
        }
    }

    fn failed(&self, probe: bool, cause: &str) {
        let mut circuit = self.lock();
        circuit.consecutive_failures = circuit.consecutive_failures.saturating_add(1);
        let trips = probe
            || (circuit.state == BreakerState::Closed
                && circuit.consecutive_failures >= self.failures);
        if !trips {
            return;
        }
        if circuit.state == BreakerState::Closed {
            circuit.opened += 1;
            let now = Instant::now();
            circuit.degraded_since = Some(now);
            let quiet = circuit
                .warned_at
                .is_none_or(|at| now.duration_since(at) >= LOG_EVERY);
            if quiet {
                let since_last = std::mem::take(&mut circuit.unlogged);
                tracing::warn!(
                    target: "stampede",
                    shard = %self.shard,
                    %cause,
                    consecutive_failures = circuit.consecutive_failures,
                    openings_not_logged = since_last,
                    "shared store unreachable: this replica is degraded (memory and in-process coalescing only) until a probe succeeds"
                );
                circuit.warned_at = Some(now);
                circuit.warned_this_time = true;
            } else {
                circuit.unlogged += 1;
                circuit.warned_this_time = false;
            }
        }
        circuit.state = BreakerState::Open;
        circuit.opened_at = Some(Instant::now());
    }

    /// A probe nobody waited for: open again, with the cooldown already served, so the
    /// next call probes at once.
    fn abandoned(&self) {
        let mut circuit = self.lock();
        if circuit.state == BreakerState::HalfOpen {
            circuit.state = BreakerState::Open;
            circuit.opened_at = Instant::now().checked_sub(self.cooldown);
        }
    }

    pub(crate) fn state(&self) -> BreakerState {
        self.lock().state
    }

    /// Whether a call now would fail fast without touching Redis: open and not yet
    /// cooled down, or half-open with its probe out (what [`Breaker::pass`] refuses).
    pub(crate) fn fails_fast(&self) -> bool {
        let circuit = self.lock();
        match circuit.state {
            BreakerState::Closed => false,
            BreakerState::HalfOpen => true,
            BreakerState::Open => circuit
                .opened_at
                .is_some_and(|at| at.elapsed() < self.cooldown),
        }
    }

    /// How often it opened, and the total time it spent open or half-open.
    pub(crate) fn degraded(&self) -> (u64, Duration) {
        let circuit = self.lock();
        let current = circuit
            .degraded_since
            .map_or(Duration::ZERO, |since| since.elapsed());
        (circuit.opened, circuit.degraded_total + current)
    }
}

impl Pass {
    /// The call got an answer (an error reply included: the server is up).
    pub(crate) fn succeeded(mut self) {
        self.reported = true;
        self.breaker.succeeded(self.probe);
    }

    /// The call's connection failed, or no answer came at all.
    pub(crate) fn failed(mut self, cause: &str) {
        self.reported = true;
        self.breaker.failed(self.probe, cause);
    }

    #[cfg(test)]
    pub(crate) fn is_probe(&self) -> bool {
        self.probe
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if !self.reported && self.probe {
            self.breaker.abandoned();
        }
    }
}

#[cfg(test)]
mod tests;
