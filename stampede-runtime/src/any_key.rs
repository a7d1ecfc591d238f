//! A key of any cache's key type, for the tables a cache keeps beside its values (kept
//! errors, source-version marks).
//!
//! Each moka cache type is a large amount of generated code, compiled again for every
//! key and value type it is used with. The values themselves need the key's own type (a
//! hit must not pay for dynamic dispatch); the side tables, read only on misses and
//! writes, take their keys as [`AnyKey`] and are compiled once for every cache.
use std::any::Any;
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// A key of any type, hashed and compared by that type's own `Hash` and `Eq`. Look it up
/// with a plain `&K` as `&dyn DynKey` (no allocation): the two hash alike.
pub(crate) struct AnyKey(Box<dyn DynKey>);

impl AnyKey {
    pub(crate) fn new<K: Hash + Eq + Send + Sync + 'static>(key: K) -> Self {
        AnyKey(Box::new(key))
    }
}

/// What a key type does through [`AnyKey`].
pub(crate) trait DynKey: Send + Sync + 'static {
    fn dyn_hash(&self, state: &mut dyn Hasher);
    fn dyn_eq(&self, other: &dyn DynKey) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<K: Hash + Eq + Send + Sync + 'static> DynKey for K {
    fn dyn_hash(&self, mut state: &mut dyn Hasher) {
        self.hash(&mut state);
    }

    fn dyn_eq(&self, other: &dyn DynKey) -> bool {
        other.as_any().downcast_ref::<K>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Hash for dyn DynKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dyn_hash(state);
    }
}

impl PartialEq for dyn DynKey {
    fn eq(&self, other: &Self) -> bool {
        self.dyn_eq(other)
    }
}

impl Eq for dyn DynKey {}

impl Hash for AnyKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (*self.0).hash(state);
    }
}

impl PartialEq for AnyKey {
    fn eq(&self, other: &Self) -> bool {
        *self.0 == *other.0
    }
}

impl Eq for AnyKey {}

impl Borrow<dyn DynKey> for AnyKey {
    fn borrow(&self) -> &(dyn DynKey + 'static) {
        &*self.0
    }
}

#[cfg(test)]
mod tests;
