//! Which loaded values are stored: all of them unless a policy says otherwise (say, not
//! `None`). A value that is not stored is still the answer of the load that produced it,
//! for its caller and every waiter; the next call loads again.
use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// The predicate, over a value of any type.
type Keep = dyn Fn(&dyn Any) -> bool + Send + Sync;

/// A predicate on loaded values, kept in a [`Policy`](crate::Policy), which has no value
/// type: the value arrives as `&dyn Any` and is checked as the type the predicate was
/// written for.
#[derive(Clone)]
pub(crate) struct CacheIf {
    keep: Arc<Keep>,
    type_name: &'static str,
}

impl CacheIf {
    pub(crate) fn new<V: 'static>(keep: fn(&V) -> bool) -> Self {
        CacheIf {
            // A value of another type is stored: the predicate does not speak for it.
            keep: Arc::new(move |value| value.downcast_ref::<V>().is_none_or(keep)),
            type_name: std::any::type_name::<V>(),
        }
    }

    pub(crate) fn keeps<V: 'static>(&self, value: &V) -> bool {
        (self.keep)(value)
    }
}

impl fmt::Debug for CacheIf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CacheIf(fn(&{}) -> bool)", self.type_name)
    }
}

#[cfg(test)]
mod tests;
