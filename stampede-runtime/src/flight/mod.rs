//! Single flight per key, and the fences that keep invalidated loads out of the store.
//!
//! - **Fences.** Every load holds a [`Leader`] with the ticket it started under: the key's
//!   fence (raised by [`Flights::invalidate`]) and the cache's epoch (raised by
//!   [`Flights::invalidate_all`]). Its store runs under the registry lock only if neither
//!   moved, so a value computed before an invalidation never lands after it, coalesced or
//!   not. A key has a record only while loads of it run.
//! - **On success or error** the leader [settles](Leader::settle): the fenced store and the
//!   flight's removal happen under one lock (a later caller finds one or the other, never
//!   neither), then every waiter gets a clone of the outcome. Errors are shared, not stored.
//! - **On cancel or panic** the leader is dropped unsettled: nothing is stored, and the
//!   waiters wake with [`Outcome::Abandoned`]; each joins again, the first becomes the new
//!   leader (takeover) and the rest wait for it. No waiter hangs.
//! - **Late joiners.** A load whose answer rests on a read of the shared store says so
//!   ([`Leader::rests_on`]): a waiter that joined after that read was sent may have begun
//!   after an invalidation the read did not see, so its answer is not shared with it
//!   ([`Waiter::answers`]); it joins again, and any later flight read after it joined.
//!   [`Flights::tick`] orders a cache's joins and reads.
//! - **No lock is held while user code runs**: the registry lock covers a map operation,
//!   a flight's lock an outcome read or a waker swap.
//!
//! `registry.rs` is compiled twice: here against `std`, and in the tests against shuttle's
//! locks (a model checker exploring interleavings), which is why it reaches its locks
//! through `super::sync`.
mod registry;

pub(crate) use registry::{Flights, Join, Leader, Outcome, Waiter};

/// The locks the registry is built on; the tests compile it again on shuttle's.
mod sync {
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
}

#[cfg(test)]
mod tests;
