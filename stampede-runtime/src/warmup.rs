//! Preloading known hot keys before traffic arrives, so the first requests after a deploy
//! or a flush hit a warm cache instead of stampeding a cold one.
use crate::cache::Cache;
use futures_util::StreamExt;
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;

/// How many keys load at once when the cache has no admission semaphore to size the batch.
pub const WARMUP_CONCURRENCY: usize = 16;

/// What [`warmup`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WarmupReport<K, E> {
    /// Keys that answered with a value (loaded now, or already cached).
    pub loaded: usize,
    /// Keys whose load failed (origin error, or shed by admission with nothing to serve).
    pub failed: usize,
    /// Each failed key with its error, in completion order.
    pub errors: Vec<(K, E)>,
}

/// Loads every key of `keys` into `cache` through `origin`, tolerating failures, and
/// reports how many loaded and which failed.
///
/// Each key goes through [`Cache::load`], so a warm key costs nothing, concurrent requests
/// for a key being warmed join its load, and every origin call takes a permit of the
/// cache's admission semaphore like any other load. At most the semaphore's limit of keys
/// load at once (else [`WARMUP_CONCURRENCY`]), so warmup alone never queues past the
/// limit; under live traffic a key may still be shed, and is then reported as failed.
///
/// For a cached function, warm its handle's cache with the function's origin (what its
/// body calls), not with the cached function itself: that would wait on its own load.
///
/// ```
/// use std::time::Duration;
/// use stampede_runtime::{warmup, Cache, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let policy = Policy::builder("squares").fresh(Duration::from_secs(60)).build().unwrap();
/// let squares: Cache<u64, u64, String> = Cache::with_error_map(policy, |e| e.to_string());
/// let report = warmup(&squares, 0..10, |n| async move {
///     if n == 7 { Err("seven is unlucky".to_owned()) } else { Ok(n * n) }
/// })
/// .await;
/// assert_eq!((report.loaded, report.failed), (9, 1));
/// assert_eq!(report.errors, vec![(7, "seven is unlucky".to_owned())]);
/// assert_eq!(squares.peek(&9), Some(81));
/// # }
/// ```
pub async fn warmup<K, V, E, F, Fut>(
    cache: &Cache<K, V, E>,
    keys: impl IntoIterator<Item = K>,
    origin: F,
) -> WarmupReport<K, E>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<V, E>> + Send + 'static,
{
    let origin = Arc::new(origin);
    let at_once = cache.admission_limit().unwrap_or(WARMUP_CONCURRENCY);
    let loads = futures_util::stream::iter(keys).map(|key| {
        let (cache, origin, reported) = (cache.clone(), origin.clone(), key.clone());
        async move {
            let result = cache.load_keyed(key, move |key| origin(key.clone())).await;
            (reported, result)
        }
    });
    let mut loads = loads.buffer_unordered(at_once.max(1));
    let mut report = WarmupReport {
        loaded: 0,
        failed: 0,
        errors: Vec::new(),
    };
    while let Some((key, result)) = loads.next().await {
        match result {
            Ok(_) => report.loaded += 1,
            Err(error) => {
                report.failed += 1;
                report.errors.push((key, error));
            }
        }
    }
    report
}
