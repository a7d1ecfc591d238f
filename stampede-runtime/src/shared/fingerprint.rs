//! The fingerprint of a value type, written into every shared-store envelope.
//!
//! bincode writes no field names and no type tags, so bytes written as one type often
//! decode as another without an error: a `String` reads as a `u64` length-prefix-first,
//! two swapped `u64` fields read swapped, a `u32` field widened to `u64` reads fine until
//! a large number. A replica built from new code would then serve an old replica's value
//! as its own: a wrong answer. So each envelope carries a fingerprint of the type it was
//! written as, and a replica whose type has another fingerprint treats it as a miss.
//!
//! The fingerprint hashes the type's serde *shape*, traced through its `Deserialize`
//! implementation: container names, field names and order, variant names, and the
//! primitive type of every leaf. Two builds of the same type agree; a changed field, a
//! reordered struct, a renamed variant or another type altogether disagree. A type whose
//! `Deserialize` cannot be traced (one that reads self-describing input such as
//! `serde_json::Value`, or validates what it reads) falls back to its Rust type name,
//! which still tells different types apart but not a changed definition under the same
//! name; bumping the cache's `version` is the way to retire such values.
use serde::de::DeserializeOwned;
#[cfg(feature = "redis")]
use serde_reflection::{Tracer, TracerConfig};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

/// The fingerprint of `V`, traced once per process and type.
pub(crate) fn of<V: DeserializeOwned + 'static>() -> u64 {
    static TRACED: OnceLock<RwLock<HashMap<TypeId, u64>>> = OnceLock::new();
    let traced = TRACED.get_or_init(Default::default);
    let id = TypeId::of::<V>();
    if let Some(fingerprint) = traced.read().unwrap_or_else(|e| e.into_inner()).get(&id) {
        return *fingerprint;
    }
    let fingerprint = fnv1a(shape::<V>().as_bytes());
    traced
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, fingerprint);
    fingerprint
}

/// The traced shape as text, or the type name when it cannot be traced.
#[cfg(feature = "redis")]
fn shape<V: DeserializeOwned>() -> String {
    // A `Deserialize` of the application's own may panic on the tracer's made-up input;
    // that must cost it the shape, not the process.
    let traced = std::panic::catch_unwind(|| {
        let mut tracer = Tracer::new(TracerConfig::default());
        let (format, _) = tracer.trace_simple_type::<V>().ok()?;
        let registry = tracer.registry().ok()?;
        Some(format!("shape {format:?} {registry:?}"))
    });
    match traced {
        Ok(Some(shape)) => shape,
        _ => format!("type {}", std::any::type_name::<V>()),
    }
}

/// Without the `redis` feature no envelope leaves the process, so nothing reads a
/// fingerprint; the type's name keeps the function whole without the tracer (and the
/// crates it brings).
#[cfg(not(feature = "redis"))]
fn shape<V>() -> String {
    format!("type {}", std::any::type_name::<V>())
}

/// FNV-1a, 64 bits: stable across processes, builds and platforms, unlike `std`'s hashers.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(all(test, feature = "redis"))]
mod tests;
