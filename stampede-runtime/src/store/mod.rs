//! Where envelopes live. In process: [`memory`], typed values, no serialization.
//!
//! Shared between replicas: a backend behind the `shared::SharedStore` seam (today
//! `redis`), addressed by [`keys`] and holding envelopes in the `wire` format.
// The loader reaches the shared store only once it is wired in; until then only tests do.
#[allow(dead_code)]
pub(crate) mod keys;
pub(crate) mod memory;
#[allow(dead_code)]
pub(crate) mod redis;
#[allow(dead_code)]
pub(crate) mod shared;
#[allow(dead_code)]
pub(crate) mod wire;
