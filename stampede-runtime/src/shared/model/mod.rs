//! A model of the shared store, in memory and deterministic, for a simulator of the fleet.
//!
//! [`server`] is one Redis server: its keyspace with expiries, its script cache and its run
//! id. It answers every command stampede sends (the Lua scripts of
//! `shared/redis/lua/*.lua` by their SHA1, and the plain commands around them) exactly as
//! Redis 7.0 does, replies and published messages alike, at a server time the caller
//! gives: no clock, no randomness, no threads, no I/O of its own.
//!
//! The scripts are written out again in Rust (`server/scripts.rs`), so every change to a
//! script changes the model in the same commit. The differential test (`differential.rs`)
//! holds the two together: seeded sequences of stampede's commands run against a real
//! `redis-server` (and a local Redis Cluster) and against the model, and every reply, every
//! published message and the keyspace after each command must agree.
//!
//! A simulation reaches the server through `network.rs`, which also follows the leases
//! whose granting reply it lost (`orphans.rs`), for the simulator to judge.
// Only a simulation connects to the model; the differential test drives the server alone.
#[cfg(feature = "simulation")]
pub(crate) mod network;
#[cfg(feature = "simulation")]
mod orphans;
pub(crate) mod server;

#[cfg(test)]
mod differential;
