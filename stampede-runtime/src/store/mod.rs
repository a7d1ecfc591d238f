//! Where envelopes live.
//!
//! In process: [`memory`], typed values, no serialization. Shared between replicas: a
//! backend behind the [`shared::SharedStore`] seam (today [`redis`]), addressed by
//! [`keys`] and holding envelopes in the [`wire`] format.
//!
//! # One entry in Redis
//! ```text
//! stampede:{user-profile:v1:acme:42}        envelope (wire format), PX = keep_until
//! stampede:{user-profile:v1:acme:42}:lease  the loading replica's fence, PX = lease TTL
//! stampede:{user-profile:v1:acme:42}:fence  fence counter, raised by leases and invalidations
//! stampede:{user-profile:v1:acme:42}:ver    highest source version invalidated (20 digits)
//! stampede:notices                          channel: `<p|i|r> <fence> <node> <value key>`
//! ```
//! All four keys share the hash tag, so each script touches one cluster slot.
//!
//! # Why each check is there
//! - **Fence on publish**: a load publishes only under the fence it started with. A newer
//!   lease (its own lease lapsed: a paused owner) or an invalidation raised the fence
//!   since, and its value may predate either: it is refused, its callers still get it.
//! - **Fence restart**: a lost counter restarts at server time × 1024, above every fence
//!   handed out before, so an old publisher can never meet an equal fence again.
//! - **Source-version mark**: invalidations carry the version of the change; one at or
//!   below the mark or the stored value's own version arrived late and changes nothing,
//!   and a value read at a version below the mark is not stored (a lagging read replica).
//! - **Lease only when nothing servable**: a value published a moment ago is returned
//!   instead of a second load; a lease without a TTL or not ours is taken over.
//! - **Anything foreign is absent**: a missing value, another type, a non-number or a key
//!   without TTL at one of our keys is read as absent and overwritten, so it never
//!   wedges a key; bytes that do not decode are a counted miss.
//! - **Server time**: deadlines are Redis `TIME` milliseconds, so skewed hosts agree.
//! - **Bounded calls**: every call ends within the response timeout; a circuit breaker
//!   turns an outage into instant failures, and a heartbeat recovers without callers.
// The loader reaches the shared store only once it is wired in; until then only tests do.
#[allow(dead_code)]
pub(crate) mod fingerprint;
pub(crate) mod keys;
pub(crate) mod lease;
pub(crate) mod memory;
#[allow(dead_code)]
pub(crate) mod redis;
#[allow(dead_code)]
pub(crate) mod shared;
pub(crate) mod tiered;
#[allow(dead_code)]
pub(crate) mod wire;
