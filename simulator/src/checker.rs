//! The fleet's guarantees, checked against one run's history. Each check says what it
//! holds and, where the documentation gives a known limit, holds it as documented.
//!
//! - **Retired values** (a, c): no call that began after a write's invalidation (plain,
//!   at its source version, by tag, or a write-through insert) returned `Ok` answers a
//!   value read below the written version: at once on `redis`; on `tiered` once the
//!   notice can have arrived; with faults, once a copy loaded while the store could not
//!   be read has run out (`degraded_ttl`, the stale window) and a lost subscription has
//!   been noticed; an acknowledged write on `tiered`, at once, under every fault. On
//!   `memory`, only on the replica that invalidated.
//! - **Staleness** (b): no value is served older than the policy allows: read by the
//!   origin at most its latency, `fresh`, `stale` (and `stale_if_error`) before.
//! - **One origin call** (d): without faults, with coalescing and a shared store, a key's
//!   origin calls never overlap but across an invalidation or write of the key, and no
//!   call starts while a value the fleet loaded is still fresh (unless XFetch refreshed it
//!   early or a write retired it); a refresh still running when too little of the value's
//!   servable window is left is taken over, as `docs/fleet.md` states, and overlaps it;
//!   so is a load held past the lease's length (an admission queue counts), whose value
//!   the fence then refuses, so the taker's call may come after it, and a value of
//!   either of two such calls is not counted as the fleet's.
//! - **Bounded waits** (e): every caller is answered: within its deadline, or within the
//!   lease and the store's timeouts; never hung. A lease granted by a read whose reply
//!   was lost is released by its token (or the read resent) once the server answers the
//!   replica again: the server does not answer it for longer than [`ORPHAN_RELEASE`]
//!   first (`docs/fleet.md`), whatever ended the lease meanwhile, unless the replica was
//!   frozen or killed since.
//! - **Admission** (f): a replica's origin calls at once never pass its limit.
//! - **Abandoned in time** (h): with `load_timeout`, no origin call of one key runs past
//!   it (a batch's shared call is not one load's, and is not bounded by it).
//! - **Nothing leaks** (g): once the run is quiet, no load is in flight, no invalidation is
//!   owed, no lease is held.
use crate::fleet::{HEARTBEAT, RESPONSE_TIMEOUT};
use crate::history::{Event, How, Outcome};
use crate::shape::{Kind, Shape};
use std::time::Duration;

/// A replica's state once the run was quiet.
#[derive(Debug, Clone)]
pub struct Quiescent {
    pub replica: usize,
    pub in_flight: u64,
    pub queued: u64,
    /// A fleet-wide admission's permits the replica holds.
    pub permits_held: u64,
    /// Loads that took the replica's local share of a fleet-wide admission.
    pub local_permits: u64,
}

fn us(duration: Duration) -> u64 {
    duration.as_micros() as u64
}

/// The network's worst latency one way in a healthy run (see `healthy` in lib.rs).
const LATENCY: Duration = Duration::from_micros(500);

/// How long the server may go on answering a replica (without an outage between) before
/// the release of a lease granted by its read whose reply was lost reaches it: the release
/// is sent at once, or, when that fails, with what the replica owes, retried every 250 ms
/// once its breaker lets it, which after an outage waits out its cooldown (1 s) and a
/// probe; a loss or two of the release on a lossy network are allowed for. (1.5 s failed
/// seed 2012326 by 0.28 s, a release paid just past a breaker's cooldown.)
pub const ORPHAN_RELEASE: Duration = Duration::from_secs(3);

/// Every guarantee `events` broke, a line each. `orphaned`: the leases granted by reads
/// whose reply was lost that were not released within [`ORPHAN_RELEASE`], as the model
/// saw them.
pub fn check(
    shape: &Shape,
    faulty: bool,
    events: &[Event],
    quiescent: &[Quiescent],
    leases: usize,
    orphaned: &[String],
) -> Vec<String> {
    let mut violations = Vec::new();
    for orphan in orphaned {
        violations.push(format!("(e) {orphan}"));
    }
    retired(shape, faulty, events, &mut violations);
    staleness(shape, faulty, events, &mut violations);
    if !faulty && shape.coalesce && shape.shared() {
        one_origin_call(shape, events, &mut violations);
    }
    bounded(shape, faulty, events, &mut violations);
    if let Some(limit) = shape.admission {
        admitted(limit, events, &mut violations);
        if shape.fleet_admission {
            let replicas = replicas(events).max(quiescent.len());
            admitted_fleet_wide(shape, limit, faulty, replicas, events, &mut violations);
        }
    }
    if let Some(limit) = shape.load_timeout {
        abandoned_in_time(limit, events, &mut violations);
    }
    for replica in quiescent {
        if replica.in_flight > 0 {
            violations.push(format!(
                "(g) r{}: {} loads still in flight once quiet",
                replica.replica, replica.in_flight
            ));
        }
        if replica.permits_held > 0 {
            violations.push(format!(
                "(g) r{}: {} fleet-wide permits still held once quiet",
                replica.replica, replica.permits_held
            ));
        }
        if !faulty && replica.local_permits > 0 {
            violations.push(format!(
                "(f) r{}: {} loads took the local share of a fleet-wide admission with the store healthy",
                replica.replica, replica.local_permits
            ));
        }
        if replica.queued > 0 {
            violations.push(format!(
                "(g) r{}: {} invalidations still owed to a healthy store once quiet",
                replica.replica, replica.queued
            ));
        }
    }
    if leases > 0 {
        violations.push(format!("(g) {leases} leases still held once quiet"));
    }
    violations
}

/// How long after an invalidation returned a retired value may still be served, as the
/// documentation promises for this shape.
fn retired_lag(shape: &Shape, faulty: bool, evicted: bool) -> u64 {
    match (shape.kind, faulty) {
        // An acknowledged write returns once no replica can serve what it retired, under
        // every fault but one the documentation names as its limit: each replica that
        // hears of it applied it, and any other serves no copy (its hearing lease ran out),
        // keeps none loaded without the store and joins no load begun before. An evicted
        // key (a tag's version, a fence and its mark) forgets what it recorded, as
        // `docs/fleet.md` says of `allkeys-lru`: such runs are held to the bound below.
        (Kind::Tiered, _) if shape.acknowledged && !evicted => 0,
        (Kind::Memory | Kind::Redis, false) => 0,
        // The notice's way to each replica.
        (Kind::Tiered, false) => us(LATENCY * 2),
        // A copy made while the store could not be read lives `degraded_ttl` (the stale
        // window); a silent subscription is noticed within a heartbeat and a timeout; a
        // frozen replica hears nothing until it thaws (the longest freeze drawn).
        (_, true) => {
            us(shape.stale + HEARTBEAT * 2 + RESPONSE_TIMEOUT * 2 + Duration::from_millis(2500))
        }
    }
}

fn retired(shape: &Shape, faulty: bool, events: &[Event], violations: &mut Vec<String>) {
    let evicted = (events.iter())
        .any(|event| matches!(event, Event::Fault { what, .. } if what.starts_with("Evict")));
    let lag = retired_lag(shape, faulty, evicted);
    for write in events {
        let Event::Write {
            replica: writer,
            key,
            version,
            how,
            end: returned,
            ok: true,
            ..
        } = write
        else {
            continue;
        };
        for call in events {
            let Event::Call {
                replica,
                key: called,
                start,
                outcome: Outcome::Value {
                    version: served, ..
                },
                ..
            } = call
            else {
                continue;
            };
            let bound = shape.kind != Kind::Memory || replica == writer;
            if bound && called == key && *start > returned + lag && served < version {
                violations.push(format!(
                    "(a) r{replica} k{key}: a call that began at {start} µs, after the {how:?} of v{version} on r{writer} returned at {returned} µs, got v{served}"
                ));
            }
        }
    }
}

fn staleness(shape: &Shape, faulty: bool, events: &[Event], violations: &mut Vec<String>) {
    let mut allowed = shape.origin.1 + shape.fresh + shape.stale + LATENCY * 4;
    if let Some(bound) = shape.stale_if_error {
        allowed += bound;
    }
    if faulty {
        // Calls the store answers late still read a value current when they were sent.
        allowed += RESPONSE_TIMEOUT * 8;
    }
    for call in events {
        // A batch answers the values it found at its start with the rest, at its end.
        if let Event::Call {
            replica,
            key,
            start,
            end,
            outcome: Outcome::Value { version, read_at },
            batch,
        } = call
            && (if *batch { start } else { end }).saturating_sub(*read_at) > us(allowed)
        {
            violations.push(format!(
                "(b) r{replica} k{key}: served v{version}, read at {read_at} µs, at {end} µs: older than {allowed:?}"
            ));
        }
    }
}

fn one_origin_call(shape: &Shape, events: &[Event], violations: &mut Vec<String>) {
    let origins: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            Event::Origin {
                replica,
                key,
                start,
                end,
                failed,
                ..
            } => Some((*replica, *key, *start, *end, *failed)),
            _ => None,
        })
        .collect();
    // A write of the key, or a tag invalidation of its group, between `from` and `to`:
    // it retires the load it overlaps or the value stored before it.
    let written = |key: u64, from: u64, to: u64| {
        events.iter().any(|event| match event {
            Event::Write {
                key: k,
                how,
                start,
                end,
                ..
            } => {
                let touches = *k == key || (*how == How::Tag && k % 2 == key % 2);
                touches && *end >= from && *start <= to
            }
            _ => false,
        })
    };
    let margin = us(LATENCY * 4) + 5_000;
    // A load takes the lease with its read, then may read its tags' versions (a new
    // replica waits for its subscription first) and queue for an admission permit before
    // its origin: a write in between fences it out, and the next load overlaps it.
    let queued = 100_000 + shape.admission.map_or(0, |_| 1_000_000);
    // Whether a call of `key` starting at `s2` may be a takeover of the lease of the load
    // whose call ran from `s1` to `e1` (or that load a takeover of its lease).
    let takeover = |key: u64, s1: u64, e1: u64, s2: u64| {
        // A refresh held elsewhere is taken over before the value's servable window
        // ends (its stale window, or its fresh time when XFetch refreshes it early and
        // it has none), so the window never turns into misses for want of a lease:
        // near its end, a second call is due. The value is the last one loaded or
        // inserted before the first call began. "Too little left" is the runtime's
        // twice a recompute time plus 100 ms, or one origin call at its slowest. An
        // inserted value's window counts from the insert's call, as the runtime counts
        // its age (an acknowledged insert returns up to a hearing lease later: seed
        // 37025689 was taken over near the end of a window the checker counted from
        // there).
        let loaded = origins
            .iter()
            .filter(|&&(_, k, _, e, failed)| k == key && !failed && e <= s1)
            .map(|&(_, _, _, e, _)| e);
        let inserted = events.iter().filter_map(|event| match event {
            Event::Write {
                key: k,
                how: How::Insert,
                told,
                end,
                ..
            } if *k == key && *end <= s1 => Some(*told),
            _ => None,
        });
        let value_before = loaded.chain(inserted).max();
        // The taker counts "its last recompute time" from what it knows: its memory's
        // copy (an older value, loaded more slowly) or the one the holder's lease
        // recorded. So any value of the key loaded before the taker's call may set it
        // (seed 53820336: a replica serving its own older copy, recomputed in 333 ms,
        // took over a refresh queued for a fleet-wide permit 0.1 s before the checker,
        // counting the store's 260 ms, allowed).
        let slowest = origins
            .iter()
            .filter(|&&(_, k, _, e, failed)| k == key && !failed && e <= s2)
            .map(|&(_, _, s, e, _)| e - s)
            .max()
            .unwrap_or(0);
        let refreshed = shape.stale > Duration::ZERO || shape.xfetch.is_some();
        let taken_over = refreshed
            && value_before.is_some_and(|loaded| {
                let stale_ends = loaded + us(shape.fresh + shape.stale);
                let left = us(shape.origin.1).max(2 * slowest) + 100_000 + margin;
                s2 + left >= stale_ends
            });
        // A holder whose lease is older than the waiter's own `lease` is taken over
        // (docs/fleet.md): it took the lease with its read, at most `queued` before
        // its origin call began (the admission queue among it). Taken over before it
        // published, its publish is refused by the fence, so the taker's call may
        // also begin after the holder's ended (seed 53309026: queued 1 s for a
        // fleet-wide permit under a 1.02 s lease, its value refused; the taker, queued
        // behind it, called the origin 21 ms after).
        let outlived_lease = s2.min(e1) + queued >= s1 + us(shape.lease);
        taken_over || outlived_lease
    };
    // Each pair of calls of one key, the second begun after the first, judged once.
    let mut pairs = Vec::new();
    for (i, &(_, key, s1, e1, _)) in origins.iter().enumerate() {
        for (j, &(_, k2, s2, _, _)) in origins.iter().enumerate().skip(i + 1) {
            if k2 == key && s2 >= s1 {
                pairs.push((i, j, takeover(key, s1, e1, s2)));
            }
        }
    }
    // A load whose lease was taken over publishes nothing (the fence refuses it), and
    // either of two calls a takeover allows may be that load, whichever began first:
    // neither's value is counted as one the fleet has (seed 53597221: a refresh queued
    // for a fleet-wide permit was taken over near the end of the stale window; the taker
    // published, then the holder called the origin and was refused, and the next refresh
    // came when the taker's value, not the holder's, was no longer fresh).
    let mut contested = vec![false; origins.len()];
    for &(i, j, takeover) in &pairs {
        let (_, _, _, e1, _) = origins[i];
        if takeover && origins[j].2 < e1 + us(shape.fresh) {
            contested[i] = true;
            contested[j] = true;
        }
    }
    for (i, j, takeover) in pairs {
        let (r1, key, s1, e1, failed1) = origins[i];
        let (r2, _, s2, _, _) = origins[j];
        if s2 < e1 && !takeover && !written(key, s1.saturating_sub(queued), s2) {
            violations.push(format!(
                "(d) k{key}: origin calls overlap across the fleet: r{r1} from {s1} µs to {e1} µs, r{r2} from {s2} µs"
            ));
        } else if !failed1
            && !takeover
            && !contested[i]
            && shape.xfetch.is_none()
            && s2 >= e1
            && s2 + margin < e1 + us(shape.fresh)
            && !written(key, s1.saturating_sub(queued), s2)
        {
            violations.push(format!(
                "(d) k{key}: r{r2} called the origin at {s2} µs while r{r1}'s value (loaded until {e1} µs) was fresh for {:?}",
                shape.fresh
            ));
        }
    }
}

fn bounded(shape: &Shape, faulty: bool, events: &[Event], violations: &mut Vec<String>) {
    let wait = match shape.timeout {
        Some(timeout) => timeout + LATENCY * 4,
        None => {
            // Waits on another replica's lease (at most the lease, or its holder's
            // silence), the store's timeouts on the way, the origin itself, and a queue
            // for an admission permit.
            shape.lease
                + RESPONSE_TIMEOUT * if faulty { 12 } else { 4 }
                + shape.origin.1 * 3
                + Duration::from_secs(1)
        }
    };
    for call in events {
        let Event::Call {
            replica,
            key,
            start,
            end,
            outcome,
            ..
        } = call
        else {
            continue;
        };
        // A frozen replica's callers wait while it is frozen.
        let frozen: u64 = events
            .iter()
            .filter_map(|event| match event {
                Event::Frozen {
                    replica: r,
                    start: from,
                    end: to,
                } if r == replica && from < end && to > start => Some(to - from),
                _ => None,
            })
            .sum();
        if *outcome == Outcome::Hung || end - start > us(wait) + frozen {
            violations.push(format!(
                "(e) r{replica} k{key}: a call from {start} µs waited until {end} µs ({outcome:?}), past {wait:?}"
            ));
        }
    }
}

fn abandoned_in_time(limit: Duration, events: &[Event], violations: &mut Vec<String>) {
    // The timer's millisecond, and the poll that drops the call.
    let bound = us(limit) + 2_000;
    for event in events {
        if let Event::Origin {
            replica,
            key,
            start,
            end,
            batch: 0,
            ..
        } = event
            && end - start > bound
        {
            violations.push(format!(
                "(h) r{replica} k{key}: an origin call ran from {start} µs to {end} µs, past its load_timeout of {limit:?}"
            ));
        }
    }
}

/// How many replicas called the origin (a killed one's successor is another).
fn replicas(events: &[Event]) -> usize {
    (events.iter())
        .filter_map(|event| match event {
            Event::Origin { replica, .. } => Some(*replica + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// (f) for a fleet-wide admission: the whole fleet's origin calls at once. Without faults
/// they never pass the limit. With faults, the documented bound: the fleet's permits,
/// plus each replica's local share while the store cannot be reached, plus the permits
/// a restart without data or a freeze past the permit TTL took from calls still running
/// (at most the limit again).
fn admitted_fleet_wide(
    shape: &Shape,
    limit: usize,
    faulty: bool,
    replicas: usize,
    events: &[Event],
    violations: &mut Vec<String>,
) {
    let bound = match faulty {
        false => limit,
        true => 2 * limit + replicas * shape.local_limit(),
    };
    let mut edges: Vec<(u64, i64)> = Vec::new();
    let mut batches = std::collections::BTreeSet::new();
    for event in events {
        if let Event::Origin {
            start, end, batch, ..
        } = event
            && (*batch == 0 || batches.insert(*batch))
        {
            edges.push((*start, 1));
            edges.push((*end, -1));
        }
    }
    edges.sort();
    let mut running = 0_i64;
    for (at, change) in edges {
        running += change;
        if running > bound as i64 {
            violations.push(format!(
                "(f) the fleet: {running} origin calls at once at {at} µs, past the fleet-wide bound {bound} (limit {limit})"
            ));
            return;
        }
    }
}

fn admitted(limit: usize, events: &[Event], violations: &mut Vec<String>) {
    let mut edges: Vec<(usize, u64, i64)> = Vec::new();
    let mut batches = std::collections::BTreeSet::new();
    for event in events {
        if let Event::Origin {
            replica,
            start,
            end,
            batch,
            ..
        } = event
            // A batch's one call reads several keys under one permit.
            && (*batch == 0 || batches.insert(*batch))
        {
            edges.push((*replica, *start, 1));
            edges.push((*replica, *end, -1));
        }
    }
    // Ends before starts at one instant: a permit returned is free for the next.
    edges.sort_by_key(|&(replica, at, change)| (replica, at, change));
    let mut running = 0_i64;
    let mut current = usize::MAX;
    for (replica, at, change) in edges {
        if replica != current {
            (current, running) = (replica, 0);
        }
        running += change;
        if running > limit as i64 {
            violations.push(format!(
                "(f) r{replica}: {running} origin calls at once at {at} µs, past the limit {limit}"
            ));
        }
    }
}
