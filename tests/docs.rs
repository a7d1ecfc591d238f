//! The README's and the guides' Rust blocks, compiled (and run, unless marked `no_run`)
//! as doctests of this package, whose dev-dependencies they may use. A block that cannot
//! compile says why beside its `ignore`.
#![cfg(doctest)]

#[doc = include_str!("../README.md")]
mod readme {}

#[doc = include_str!("../docs/admission.md")]
mod admission {}

#[doc = include_str!("../docs/attribute.md")]
mod attribute {}

#[doc = include_str!("../docs/behaviour.md")]
mod behaviour {}

#[doc = include_str!("../docs/cluster.md")]
mod cluster {}

#[doc = include_str!("../docs/configuration.md")]
mod configuration {}

#[doc = include_str!("../docs/engine.md")]
mod engine {}

#[doc = include_str!("../docs/errors.md")]
mod errors {}

#[doc = include_str!("../docs/fleet.md")]
mod fleet {}

#[doc = include_str!("../docs/observability.md")]
mod observability {}

#[doc = include_str!("../docs/operations.md")]
mod operations {}

#[doc = include_str!("../docs/production.md")]
mod production {}

#[doc = include_str!("../docs/performance.md")]
mod performance {}

#[doc = include_str!("../docs/testing.md")]
mod testing {}
