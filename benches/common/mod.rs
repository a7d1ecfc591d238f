//! What the bench groups share: the key and value every contestant caches, the origin,
//! runtimes, and the notes (origin-call counts) a group leaves beside criterion's output
//! for `scripts/bench-table.py`.
#![allow(dead_code)] // each bench binary uses its own part of this module

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

pub mod contestants;

/// The cached value: a profile behind an `Arc`, so a hit is a reference-count increment
/// for every contestant.
pub type Profile = Arc<str>;

/// The one key of the hit groups.
pub const KEY: u64 = 42;

/// Entries each bounded contestant may hold.
pub const CAPACITY: u64 = 10_000;

/// Expiry for contestants that have one: long enough that nothing expires during a run.
pub const TTL: Duration = Duration::from_secs(3_600);

static PROFILE: LazyLock<Profile> = LazyLock::new(|| Arc::from("a profile of moderate size"));

/// The value every origin returns (a clone of one `Arc`, so no contestant pays for
/// building it).
pub fn profile() -> Profile {
    PROFILE.clone()
}

/// One task on one thread: the fresh-hit and churn groups.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

/// `workers` worker threads: the contended and storm groups.
pub fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a multi-thread runtime")
}

/// Counts a group records per contestant beside its timings (origin calls, loads), which
/// criterion has no place for. Written as `<target>/criterion/<group>/notes.json`.
pub struct Notes {
    group: &'static str,
    rows: Mutex<BTreeMap<String, Row>>,
}

#[derive(Default)]
struct Row {
    /// Measurement batches seen (storms, churn passes).
    runs: u64,
    /// name -> (min, max, total) over the runs.
    counts: BTreeMap<&'static str, (u64, u64, u64)>,
}

impl Notes {
    pub const fn new(group: &'static str) -> Self {
        Notes {
            group,
            rows: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records one run of `contestant` with its counts.
    pub fn record(&self, contestant: &str, counts: &[(&'static str, u64)]) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let row = rows.entry(contestant.to_owned()).or_default();
        row.runs += 1;
        for &(name, count) in counts {
            let slot = row.counts.entry(name).or_insert((u64::MAX, u64::MIN, 0));
            slot.0 = slot.0.min(count);
            slot.1 = slot.1.max(count);
            slot.2 += count;
        }
    }

    /// Prints `contestant`'s counts so far (criterion's output has no column for them).
    pub fn print(&self, contestant: &str) {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(row) = rows.get(contestant) else {
            return;
        };
        let mut line = format!("{}/{contestant}: {} runs", self.group, row.runs);
        for (name, (min, max, total)) in &row.counts {
            let _ = write!(line, "; {name} min {min} max {max} total {total}");
        }
        println!("{line}");
    }

    /// Writes every contestant's counts for the table script.
    pub fn write(&self) {
        let rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        let mut json = String::from("{\n");
        for (i, (contestant, row)) in rows.iter().enumerate() {
            let _ = write!(json, "  {contestant:?}: {{\"runs\": {}", row.runs);
            for (name, (min, max, total)) in &row.counts {
                let _ = write!(
                    json,
                    ", {name:?}: {{\"min\": {min}, \"max\": {max}, \"total\": {total}}}"
                );
            }
            json.push('}');
            json.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
        }
        json.push_str("}\n");
        let dir = criterion_dir().join(self.group);
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("notes.json"), json));
        if let Err(e) = written {
            eprintln!(
                "{}: cannot write notes.json in {}: {e}",
                self.group,
                dir.display()
            );
        }
    }
}

/// Where criterion writes (`$CRITERION_HOME`, else `<target dir>/criterion`).
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")))
        .join("criterion")
}
