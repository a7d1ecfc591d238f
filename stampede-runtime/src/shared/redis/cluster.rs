//! Which shard a key lives on, and one circuit breaker per shard.
//!
//! # Why a breaker per shard, not per store
//! A store's breaker turns repeated failures into instant ones. In a cluster one master
//! can die while the others serve: a single breaker would open on the dead shard's
//! failures and refuse calls for every key, turning one lost shard into a fleet-wide
//! degraded mode. So each master has its own breaker, and a call passes the breaker of
//! the master that owns its key's slot: the dead shard's keys fail fast (and load
//! locally), the others' keys never notice.
//!
//! The slot map comes from `CLUSTER SLOTS`, refreshed by the heartbeat. It may lag a
//! migration or a failover by a heartbeat; that only decides which breaker counts a
//! call, never where it goes (the cluster client routes and follows MOVED/ASK itself).
//! Before the first map, and for a single server, every key shares one breaker.
use super::breaker::Breaker;
use crate::shared::store::BreakerState;
use redis::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// Redis Cluster's slot count.
pub(crate) const SLOTS: u16 = 16384;

/// The cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key when
/// it has none, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            Some(&rest[..close])
        })
        .filter(|tag| !tag.is_empty());
    crc16(tagged.unwrap_or(key)) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A run of slots and the address (`host:port`) of the master serving it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    first: u16,
    last: u16,
    master: String,
}

/// The slot map and a breaker per master.
pub(crate) struct Shards {
    failures: u32,
    cooldown: Duration,
    /// Sorted by `first`; empty until the first `CLUSTER SLOTS` (always, for one server).
    ranges: RwLock<Vec<SlotRange>>,
    /// By master address; `""` guards keys whose master is not known yet.
    breakers: Mutex<HashMap<String, Arc<Breaker>>>,
}

impl Shards {
    pub(crate) fn new(failures: u32, cooldown: Duration) -> Self {
        Self {
            failures,
            cooldown,
            ranges: RwLock::new(Vec::new()),
            breakers: Mutex::new(HashMap::new()),
        }
    }

    /// The master owning `key`'s slot (`""` when unknown) and its breaker.
    pub(crate) fn for_key(&self, key: &str) -> (String, Arc<Breaker>) {
        let slot = slot(key.as_bytes());
        let master = {
            let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
            let at = ranges.partition_point(|range| range.first <= slot);
            at.checked_sub(1)
                .map(|at| &ranges[at])
                .filter(|range| slot <= range.last)
                .map(|range| range.master.clone())
                .unwrap_or_default()
        };
        let breaker = self.breaker(&master);
        (master, breaker)
    }

    /// The breaker of the master at `address`, made on first use.
    pub(crate) fn breaker(&self, address: &str) -> Arc<Breaker> {
        let mut breakers = self.breakers.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(breakers.entry(address.to_owned()).or_insert_with(|| {
            Arc::new(Breaker::new(
                self.failures,
                self.cooldown,
                address.to_owned(),
            ))
        }))
    }

    /// Every master in the slot map (each gets a heartbeat PING), `""` when there is none.
    pub(crate) fn masters(&self) -> Vec<String> {
        let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
        let mut masters: Vec<String> = ranges.iter().map(|range| range.master.clone()).collect();
        masters.sort();
        masters.dedup();
        if masters.is_empty() {
            masters.push(String::new());
        }
        masters
    }

    /// Replaces the slot map with a `CLUSTER SLOTS` reply; a reply it cannot read keeps
    /// the old map.
    pub(crate) fn update(&self, reply: &Value) -> bool {
        let Some(mut ranges) = parse_slots(reply) else {
            return false;
        };
        ranges.sort_by_key(|range| range.first);
        // A master that left the map (failed over, removed) and the breaker of the
        // unknown master are not consulted any more: their state must not linger in stats.
        self.breakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|address, _| ranges.iter().any(|range| range.master == *address));
        *self.ranges.write().unwrap_or_else(PoisonError::into_inner) = ranges;
        true
    }

    /// The worst state over all masters, how often any opened, and the longest time any
    /// one spent degraded.
    pub(crate) fn summary(&self) -> (BreakerState, u64, Duration) {
        let breakers: Vec<Arc<Breaker>> = self
            .breakers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let rank = |state: BreakerState| match state {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        };
        breakers.iter().fold(
            (BreakerState::Closed, 0, Duration::ZERO),
            |(state, opened, degraded), breaker| {
                let (its_opened, its_degraded) = breaker.degraded();
                let its_state = breaker.state();
                (
                    if rank(its_state) > rank(state) {
                        its_state
                    } else {
                        state
                    },
                    opened + its_opened,
                    degraded.max(its_degraded),
                )
            },
        )
    }
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, …], replicas…], …]`.
fn parse_slots(reply: &Value) -> Option<Vec<SlotRange>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let number = |value: &Value| match value {
                Value::Int(n) => u16::try_from(*n).ok(),
                _ => None,
            };
            let (first, last) = (number(fields.first()?)?, number(fields.get(1)?)?);
            let Value::Array(master) = fields.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok()?,
                Value::SimpleString(text) => text.clone(),
                _ => return None,
            };
            let port = number(master.get(1)?)?;
            Some(SlotRange {
                first,
                last,
                master: format!("{host}:{port}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
