//! The store shared by every replica (process memory is `crate::memory`).
//!
//! - [`store`]: the seam, `SharedStore`, in bytes: reads with leases, fenced publishes,
//!   invalidations, tag versions, and the notices of bucket subscriptions.
//! - [`redis`]: its implementation on Redis (scripts, cluster, Sentinel, TLS and access,
//!   the notice subscriber); `model` (tests and the `simulation` feature): an in-memory
//!   Redis the simulator drives through the same client.
//! - [`keys`]: where an entry lives (`prefix:3:{name:v<version>:<encoded key>}`);
//!   [`wire`]: the envelope's bytes; [`fingerprint`]: the value type's, in every envelope.
//! - [`replica`]: one runtime's side (`Replica`): its connection, and what it owes the store
//!   until it answers (invalidations, sweeps, lease releases, tag moves); [`lease`]: a
//!   lease this replica holds, its beats and its release.
//! - [`tier`]: one cache's side (`Tier`): its codec, what a read found, and the
//!   bookkeeping that keeps memory copies and running loads in line with notices.
//! - [`background`]: the threads the store's own work runs on.
//!
//! # One entry in Redis
//! ```text
//! stampede:3:{user-profile:v1:acme:42}        envelope (wire format), PX = keep_until
//! stampede:3:{user-profile:v1:acme:42}:lease  "<fence> <token> <granted ms> <alive ms> [<recompute ms>] [w]", PX = lease TTL
//! stampede:3:{user-profile:v1:acme:42}:fence  "<fence> [m<mark>] [r<recompute ms>] [i<fence>] [b<fence>]": raised by
//!                                             leases and invalidations; m: the source-version mark, r: the last
//!                                             recompute time, i and b: the fences of the last invalidation and the one before
//! stampede:3:notices                          channel: tag moves, `t <version> <replica> <tag>`
//! stampede:3:notices:2a7                      a key's bucket channel: `<p|i|r> <fence> <replica> <value key>`,
//!                                             or `v …` for a publish carrying its envelope
//! ```
//! All three keys share the hash tag, so each script touches one cluster slot.
//!
//! # Why each check is there
//! - **Fence on publish**: a load publishes only under the fence it started with. A newer
//!   lease (its own lease was taken over: a paused or lost owner) or an invalidation
//!   raised the fence since, and its value may predate either: it is refused, its callers
//!   still get it, and the refusal is announced so nobody waits for it.
//! - **Fence restart**: a lost fence restarts at server time × 1024, above every fence
//!   handed out before, so an old publisher can never meet an equal fence again. The
//!   source-version mark lives in the fence's key, so the two are lost together: a load
//!   that read before the loss is refused, whatever its version.
//! - **Source-version mark**: invalidations carry the version of the change; one below
//!   the mark arrived late and changes nothing; one at or below the stored value's own
//!   version keeps that value but still raises the fence (a replica's copy may be older);
//!   and a value read at a version below the mark is not stored (a lagging read replica).
//! - **Leases named by the replica**: a token the replica chose, so a lease whose grant
//!   it never heard of is released by that token, and a read sent twice gets its own
//!   lease back. A holder quiet for longer than the key's recompute time warrants is
//!   taken over: a lease is a hint, never a reason to wait longer than a load takes.
//! - **Lease only when nothing servable**: a value published a moment ago is returned
//!   instead of a second load.
//! - **Anything foreign is absent**: a missing value, another type, a non-number, a key
//!   without TTL or deadlines past its TTL at one of our keys is read as absent and
//!   overwritten (and logged), so it never wedges a key; bytes that do not decode are a
//!   counted miss.
//! - **Server time**: deadlines are Redis `TIME` milliseconds, so skewed hosts agree.
//! - **Memory full**: scripts delete before they write, and write through `pcall`, so a
//!   full Redis still drops invalidated values and tells every replica.
//! - **Bounded calls**: every call ends within the response timeout; a circuit breaker
//!   turns an outage into instant failures, and a heartbeat recovers without callers.
// Without the `redis` feature the store's machinery is still compiled (a cache's steps
// name it) but nothing constructs a store: unused, not wrong.
#![cfg_attr(not(feature = "redis"), allow(dead_code, unused_imports))]
pub(crate) mod acknowledgement;
pub(crate) mod background;
pub(crate) mod fingerprint;
pub(crate) mod keys;
pub(crate) mod lease;
#[cfg(all(feature = "redis", any(test, feature = "simulation")))]
pub(crate) mod model;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub(crate) mod replica;
pub(crate) mod store;
pub(crate) mod subscribed;
pub(crate) mod tier;
pub(crate) mod wire;
