//! What happened in a run, in the order it happened: what the checker reads and a
//! failing seed's trace prints. Times are microseconds of simulated time since the start.
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// A value as the origin returns it: which key, read at which source version, when.
pub type Value = (u64, u64, u64);

/// How a write retired the values before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Invalidate,
    /// `invalidate_at` the written row's version.
    InvalidateAt,
    /// `invalidate_tag` of the key's group.
    Tag,
    /// Write-through: `insert` of the written row.
    Insert,
}

/// What a caller got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A value: its source version and when the origin read it (µs).
    Value { version: u64, read_at: u64 },
    /// An error, as the caller saw it.
    Error(String),
    /// No answer within the harness's own bound: a hang.
    Hung,
}

#[derive(Debug, Clone)]
pub enum Event {
    /// A caller's load (`batch`: one key of a batch load, whose values found at its
    /// start are answered with the rest at its end).
    Call {
        replica: usize,
        key: u64,
        start: u64,
        end: u64,
        outcome: Outcome,
        batch: bool,
    },
    /// One origin call's read of one key (a batch's call reads several, under one
    /// `batch` number; 0 for a call of one key).
    Origin {
        replica: usize,
        key: u64,
        start: u64,
        end: u64,
        version: u64,
        failed: bool,
        /// Dropped before it answered (`load_timeout`).
        abandoned: bool,
        batch: u64,
    },
    /// A row written (at `start`), then the cache told (at `told`): values read below
    /// `version` are retired once it returned `ok`.
    Write {
        replica: usize,
        key: u64,
        version: u64,
        how: How,
        start: u64,
        told: u64,
        end: u64,
        ok: bool,
    },
    /// A fault injected.
    Fault { at: u64, what: String },
    /// A replica frozen (its process not scheduled) from `start` to `end`.
    Frozen {
        replica: usize,
        start: u64,
        end: u64,
    },
}

impl Event {
    /// When it began, to order a trace.
    pub fn start(&self) -> u64 {
        match self {
            Event::Call { start, .. }
            | Event::Origin { start, .. }
            | Event::Write { start, .. }
            | Event::Frozen { start, .. } => *start,
            Event::Fault { at, .. } => *at,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |us: &u64| format!("{:.3}s", *us as f64 / 1e6);
        match self {
            Event::Call {
                replica,
                key,
                start,
                end,
                outcome,
                batch,
            } => write!(
                f,
                "{} {} r{replica} k{key} -> {outcome:?} at {}",
                t(start),
                if *batch { "batch" } else { "call " },
                t(end)
            ),
            Event::Origin {
                replica,
                key,
                start,
                end,
                version,
                failed,
                abandoned,
                batch,
            } => write!(
                f,
                "{} origin r{replica} k{key} read v{version}{}{} until {}",
                t(start),
                if *batch > 0 {
                    format!(" (batch {batch})")
                } else {
                    String::new()
                },
                match (*failed, *abandoned) {
                    (_, true) => " (abandoned)",
                    (true, false) => " (fails)",
                    (false, false) => "",
                },
                t(end)
            ),
            Event::Write {
                replica,
                key,
                version,
                how,
                start,
                told,
                end,
                ok,
            } => write!(
                f,
                "{} write r{replica} k{key} v{version} then {}{how:?} -> {} at {}",
                t(start),
                if told > start {
                    format!("at {} ", t(told))
                } else {
                    String::new()
                },
                if *ok { "ok" } else { "error" },
                t(end)
            ),
            Event::Fault { at, what } => write!(f, "{} fault {what}", t(at)),
            Event::Frozen {
                replica,
                start,
                end,
            } => {
                write!(f, "{} frozen r{replica} until {}", t(start), t(end))
            }
        }
    }
}

/// The run's events, shared by its tasks.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Vec<Event>>>);

impl History {
    pub fn record(&self, event: Event) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event);
    }

    /// Every event, ordered by when it began (ties in the order recorded).
    pub fn events(&self) -> Vec<Event> {
        let mut events = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        events.sort_by_key(Event::start);
        events
    }
}
