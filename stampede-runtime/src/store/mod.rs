//! Where envelopes live. In process: [`memory`], typed values, no serialization.
pub(crate) mod memory;
