//! The README's and the guides' Rust blocks, compiled (and run, unless marked `no_run`)
//! as doctests of this package, whose dev-dependencies they may use. A block that cannot
//! compile says why beside its `ignore`.
#![cfg(doctest)]

#[doc = include_str!("../README.md")]
mod readme {}
