use super::*;
use crate::flight::Join;
use crate::{Cache, Policy};
use std::time::Duration;

/// A detached miss moves its load's future into a task of its own: what every miss of a
/// churning cache allocates and copies. The shared store's steps, the admission queue and
/// a refresh's current value are boxed (only where they are used), and no `async` level
/// keeps a second copy of the load's arguments; this keeps it that way.
#[test]
fn a_detached_loads_future_stays_within_512_bytes() {
    let policy = Policy::builder("future-size")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u64, u64> = Cache::new(policy);
    let inner = cache.inner.clone();
    let Join::Leader(leader) = inner.flights.join(&1) else {
        unreachable!("nobody else loads")
    };
    let origin = bind(|key: &u64| std::future::ready(Ok(*key)), &1);
    let purpose = Purpose::Miss { detached: true };
    let load = inherit(detached(inner.clone(), 1, leader, origin, purpose));
    let size = std::mem::size_of_val(&load);
    assert!(size <= 512, "a detached load's future is {size} bytes");
}
