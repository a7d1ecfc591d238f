//! `#[cached]` composes with `#[tracing::instrument]` in either order.
use stampede::cached;

#[tracing::instrument]
#[cached(fresh = "60s")]
async fn outside(id: u64) -> u64 {
    id
}

#[cached(fresh = "60s", skip(label))]
#[tracing::instrument(skip(label))]
async fn inside(id: u64, label: &str) -> u64 {
    id + label.len() as u64
}

#[tokio::test(flavor = "current_thread")]
async fn composes_with_instrument_in_either_order() {
    assert_eq!(outside(1).await, 1);
    assert_eq!(inside(1, "ab").await, 3);
    assert_eq!(inside(1, "ab").await, 3);
    assert_eq!(INSIDE.stats().origin_calls, 1);
}
