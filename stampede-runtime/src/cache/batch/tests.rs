use super::*;
use crate::{CacheBuilder, Policy, Runtime};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::sync::Notify;

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("a wait in this test overran its deadline")
}

/// Errors as text, so an origin can fail with its own.
type Prices = Cache<u64, Option<u64>, String>;

fn cache(
    name: &str,
    settings: impl FnOnce(crate::PolicyBuilder) -> crate::PolicyBuilder,
) -> Prices {
    let policy = settings(Policy::builder(name).fresh(Duration::from_secs(60)))
        .build()
        .unwrap();
    let runtime = Runtime::builder().build().unwrap();
    CacheBuilder::new(policy, |error| error.to_string())
        .runtime(&runtime)
        .build()
}

/// Every origin call's keys, in the order they were asked for.
#[derive(Clone, Default)]
struct Origin {
    calls: Arc<Mutex<Vec<BTreeSet<u64>>>>,
}

impl Origin {
    /// Finds every id but multiples of 7 (not there), worth ten times the id.
    fn prices(
        &self,
    ) -> impl Fn(Vec<u64>) -> std::future::Ready<Result<HashMap<u64, u64>, String>> + Send + Sync + 'static
    {
        let calls = self.calls.clone();
        move |ids| {
            calls.lock().unwrap().push(ids.iter().copied().collect());
            std::future::ready(Ok(ids
                .into_iter()
                .filter(|id| id % 7 != 0)
                .map(|id| (id, id * 10))
                .collect()))
        }
    }

    fn calls(&self) -> Vec<BTreeSet<u64>> {
        self.calls.lock().unwrap().clone()
    }
}

fn ids(range: impl IntoIterator<Item = u64>) -> BTreeSet<u64> {
    range.into_iter().collect()
}

#[tokio::test]
async fn one_origin_call_for_the_keys_nobody_has_and_not_found_is_remembered() {
    let cache = cache("batch-basic", |p| p);
    let origin = Origin::default();
    let found = within(cache.load_many(1..=10, origin.prices()))
        .await
        .unwrap();
    let expected: HashMap<u64, u64> = (1..=10)
        .filter(|id| id % 7 != 0)
        .map(|id| (id, id * 10))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(origin.calls(), vec![ids(1..=10)]);
    // 1..=10 are cached (7 as not found): only 11 and 12 are asked for; a key twice in
    // the request is one key.
    let found = within(cache.load_many([5, 7, 11, 12, 12], origin.prices()))
        .await
        .unwrap();
    assert_eq!(found, HashMap::from([(5, 50), (11, 110), (12, 120)]));
    assert_eq!(origin.calls(), vec![ids(1..=10), ids([11, 12])]);
    // Entirely cached: no call at all.
    within(cache.load_many([1, 7, 12], origin.prices()))
        .await
        .unwrap();
    assert_eq!(origin.calls().len(), 2);
    assert_eq!(
        cache.peek(&7),
        Some(None),
        "a key left out is kept as not found"
    );
}

#[tokio::test]
async fn a_not_found_key_is_asked_again_when_the_policy_keeps_no_none() {
    let cache = cache("batch-no-none", |p| {
        p.cache_if(Option::<u64>::is_some as fn(&Option<u64>) -> bool)
    });
    let origin = Origin::default();
    within(cache.load_many([6, 7], origin.prices()))
        .await
        .unwrap();
    within(cache.load_many([6, 7], origin.prices()))
        .await
        .unwrap();
    assert_eq!(origin.calls(), vec![ids([6, 7]), ids([7])]);
}

#[tokio::test]
async fn keys_past_max_batch_go_in_calls_of_at_most_that_many() {
    let cache = cache("batch-chunks", |p| p.max_batch(4));
    let origin = Origin::default();
    let found = within(cache.load_many(1..=10, origin.prices()))
        .await
        .unwrap();
    assert_eq!(found.len(), 9);
    let calls = origin.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert!(calls.iter().all(|call| call.len() <= 4), "{calls:?}");
    let asked: BTreeSet<u64> = calls.into_iter().flatten().collect();
    assert_eq!(asked, ids(1..=10), "every key asked for once");
}

/// A second batch that overlaps a running one joins its keys and asks only for the rest;
/// a single-key load of a key in flight is joined too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_batches_join_each_others_keys() {
    let cache = cache("batch-overlap", |p| p);
    let asked = Arc::new(Mutex::new(Vec::<BTreeSet<u64>>::new()));
    // No permit until both origin calls are running.
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let origin = {
        let asked = asked.clone();
        let release = release.clone();
        move |ids: Vec<u64>| {
            asked.lock().unwrap().push(ids.iter().copied().collect());
            let release = release.clone();
            async move {
                let _permit = release.acquire().await.unwrap();
                Ok::<_, String>(
                    ids.into_iter()
                        .map(|id| (id, id))
                        .collect::<HashMap<_, _>>(),
                )
            }
        }
    };
    let first = tokio::spawn({
        let cache = cache.clone();
        let origin = origin.clone();
        async move { cache.load_many(1..=10, origin).await }
    });
    within(async {
        while asked.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let second = tokio::spawn({
        let cache = cache.clone();
        let origin = origin.clone();
        async move { cache.load_many(5..=15, origin).await }
    });
    let single = tokio::spawn({
        let cache = cache.clone();
        async move {
            cache
                .load(3, || async { unreachable!("3 is in flight") })
                .await
        }
    });
    within(async {
        while asked.lock().unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    // Both origin calls have been asked for; let them answer.
    release.add_permits(2);
    let first = within(first).await.unwrap().unwrap();
    let second = within(second).await.unwrap().unwrap();
    assert_eq!(first.len(), 10);
    assert_eq!(second.len(), 11);
    assert_eq!(within(single).await.unwrap().unwrap(), Some(3));
    assert_eq!(*asked.lock().unwrap(), vec![ids(1..=10), ids(11..=15)]);
    assert_eq!(cache.stats().origin_calls, 15, "one load per key");
}

/// An origin error fails the keys of its call only: a batch over two calls answers the
/// error, and the other call's keys are cached.
#[tokio::test]
async fn an_origin_error_fails_only_the_keys_it_was_asked_for() {
    let cache = cache("batch-error", |p| p.max_batch(2));
    let calls = Arc::new(AtomicUsize::new(0));
    let origin = {
        let calls = calls.clone();
        move |ids: Vec<u64>| {
            calls.fetch_add(1, Ordering::Relaxed);
            let fails = ids.contains(&3);
            async move {
                if fails {
                    Err("the database is down".to_owned())
                } else {
                    Ok(ids.into_iter().map(|id| (id, id)).collect())
                }
            }
        }
    };
    let answer = within(cache.load_many([1, 2, 3, 4], origin.clone())).await;
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    let fine = within(cache.load_many([1, 2], origin.clone()))
        .await
        .unwrap();
    assert_eq!(fine.len(), 2);
    assert_eq!(calls.load(Ordering::Relaxed), 2, "1 and 2 were stored");
    within(cache.load_many([3, 4], origin)).await.unwrap_err();
    assert_eq!(
        calls.load(Ordering::Relaxed),
        3,
        "3 and 4 are asked for again"
    );
}

#[tokio::test]
async fn a_panicking_origin_fails_its_keys_and_wedges_nothing() {
    let cache = cache("batch-panic", |p| p);
    let origin = |ids: Vec<u64>| async move {
        if ids.len() > 1 {
            panic!("the origin panicked");
        }
        Ok::<_, String>(
            ids.into_iter()
                .map(|id| (id, id))
                .collect::<HashMap<_, _>>(),
        )
    };
    let answer = within(cache.load_many([1, 2], origin)).await;
    let error = answer.unwrap_err();
    assert!(
        error.contains("the origin panicked while loading"),
        "{error}"
    );
    // Nothing was stored and no flight is left behind.
    let again = within(cache.load_many([1], origin)).await.unwrap();
    assert_eq!(again, HashMap::from([(1, 1)]));
}

/// The origin outlives its callers: a batch whose caller stops waiting still fills the
/// cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_caller_leaves_still_fills_the_cache() {
    let cache = cache("batch-detached", |p| p);
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let origin = {
        let started = started.clone();
        let release = release.clone();
        move |ids: Vec<u64>| {
            let started = started.clone();
            let release = release.clone();
            async move {
                started.notify_one();
                release.notified().await;
                Ok::<_, String>(
                    ids.into_iter()
                        .map(|id| (id, id))
                        .collect::<HashMap<_, _>>(),
                )
            }
        }
    };
    let caller = tokio::spawn({
        let cache = cache.clone();
        async move { cache.load_many(1..=5, origin).await }
    });
    within(started.notified()).await;
    caller.abort();
    let _ = caller.await;
    release.notify_one();
    within(async {
        while (1..=5).any(|id| cache.peek(&id).is_none()) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(cache.stats().origin_calls, 5);
}

/// Stale keys are answered at once, and their refreshes, which fall due together, go to
/// the origin together.
#[tokio::test(start_paused = true)]
async fn stale_keys_are_answered_at_once_and_refreshed_in_one_call() {
    let policy = Policy::builder("batch-stale")
        .fresh(Duration::from_secs(1))
        .stale(Duration::from_secs(60))
        .build()
        .unwrap();
    let runtime = Runtime::builder().build().unwrap();
    let cache: Prices = CacheBuilder::new(policy, |error| error.to_string())
        .runtime(&runtime)
        .clock(crate::Clock::tokio())
        .build();
    let origin = Origin::default();
    within(cache.load_many(1..=5, origin.prices()))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    let stale = within(cache.load_many(1..=5, origin.prices()))
        .await
        .unwrap();
    assert_eq!(stale.len(), 5, "answered with the stale values");
    within(async {
        while origin.calls().len() < 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(origin.calls(), vec![ids(1..=5), ids(1..=5)]);
}

/// The single-key door: concurrent calls within the window share one origin call, and
/// keys already cached or loading are not asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_single_key_calls_within_the_window_are_one_origin_call() {
    let cache = cache("batch-door", |p| p.batch_window(Duration::from_millis(100)));
    let origin = Origin::default();
    within(cache.load_many([7, 50], origin.prices()))
        .await
        .unwrap();
    let price = Arc::new(cache.batcher(origin.prices()));
    let calls: Vec<_> = (1..=50)
        .map(|id| {
            let price = price.clone();
            tokio::spawn(async move { (id, price.load(id).await) })
        })
        .collect();
    for call in calls {
        let (id, answer) = within(call).await.unwrap();
        let expected = (id % 7 != 0).then_some(id * 10);
        assert_eq!(answer, Ok(expected), "id {id}");
    }
    let asked = origin.calls();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(
        asked[1],
        (1..50).filter(|id| *id != 7).collect(),
        "every id but the two cached"
    );
    // Cached now: no origin call.
    assert_eq!(within(price.load(3)).await, Ok(Some(30)));
    assert_eq!(origin.calls().len(), 2);
}

/// A hundred callers asking at once for overlapping sets of 1..=200 through one batcher:
/// every id reaches the origin once, and the callers that ask while an origin call runs
/// share the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_overlapping_batches_ask_for_each_id_once_in_a_few_calls() {
    let cache = cache("batch-hundred", |p| p);
    let asked = Arc::new(Mutex::new(Vec::<Vec<u64>>::new()));
    let origin = {
        let asked = asked.clone();
        move |ids: Vec<u64>| {
            asked.lock().unwrap().push(ids.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, String>(
                    ids.into_iter()
                        .map(|id| (id, id))
                        .collect::<HashMap<_, _>>(),
                )
            }
        }
    };
    let prices = Arc::new(cache.batcher(origin));
    let mut rng = fastrand::Rng::with_seed(7);
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let ids: Vec<u64> = (0..40).map(|_| rng.u64(1..=200)).collect();
            let prices = prices.clone();
            tokio::spawn(async move {
                let found = prices.load_many(ids.clone()).await.unwrap();
                assert!(ids.iter().all(|id| found.get(id) == Some(id)));
            })
        })
        .collect();
    for call in calls {
        within(call).await.unwrap();
    }
    let asked = asked.lock().unwrap().clone();
    let mut ids: Vec<u64> = asked.iter().flatten().copied().collect();
    let total = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(total, ids.len(), "an id asked for twice: {asked:?}");
    // ⌈200 / 100⌉ calls, and a few more for the callers that asked between two of them.
    assert!(asked.len() <= 6, "{} origin calls: {asked:?}", asked.len());
}

/// An origin that loads more keys of its own batcher (a tree, level by level), here from
/// another task, is not held back by the origin call it runs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_loads_more_keys_of_its_own_batcher_does_not_wait_for_itself() {
    use tokio::sync::mpsc;
    type Reply = oneshot::Sender<Result<HashMap<u64, u64>, String>>;
    let cache = cache("batch-tree", |p| p);
    // The origin asks a helper task, which holds the batcher, for a node's children.
    let (ask, mut asked) = mpsc::unbounded_channel::<(Vec<u64>, Reply)>();
    let origin = move |ids: Vec<u64>| {
        let ask = ask.clone();
        async move {
            // A node's children are 2id and 2id + 1, below 16; its value is its id plus
            // its children's.
            let children: Vec<u64> = ids
                .iter()
                .flat_map(|id| [2 * id, 2 * id + 1])
                .filter(|child| *child < 16)
                .collect();
            let (reply, below) = oneshot::channel();
            ask.send((children, reply))
                .map_err(|_| "no helper".to_owned())?;
            let below = below.await.map_err(|_| "no reply".to_owned())??;
            let value = |id: u64| {
                id + below.get(&(2 * id)).unwrap_or(&0) + below.get(&(2 * id + 1)).unwrap_or(&0)
            };
            Ok(ids
                .into_iter()
                .map(|id| (id, value(id)))
                .collect::<HashMap<_, _>>())
        }
    };
    let tree = Arc::new(cache.batcher(origin));
    let helper = tokio::spawn({
        let tree = tree.clone();
        async move {
            while let Some((children, reply)) = asked.recv().await {
                let tree = tree.clone();
                tokio::spawn(async move {
                    let _ = reply.send(tree.load_many(children).await);
                });
            }
        }
    });
    let root = within(tree.load(1)).await.unwrap();
    assert_eq!(root, Some((1..16).sum()));
    helper.abort();
}
