//! The hottest keys of a cache: under a skewed load, the key that drives the origin's
//! load tops `hot_keys()` with its true counts, and fresh hits pay only a sampled branch.
use stampede::{Cache, Policy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn under_a_skewed_load_the_key_most_misses_go_to_tops_the_hot_keys() {
    let policy = Policy::builder("hot-skewed")
        .fresh(Duration::from_secs(1))
        .build()
        .unwrap();
    let cache: Cache<u64, u64> = Cache::new(policy);
    let calls: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let mut keys = testkit::Skewed::new(11);
    for _ in 0..50_000 {
        let key = keys.next_key();
        let calls = calls.clone();
        let value = cache
            .load(key, move || async move {
                *calls.lock().unwrap().entry(key).or_default() += 1;
                Ok(key)
            })
            .await;
        assert_eq!(value, Ok(key));
        // Everything expires between calls: each call is a miss and an origin call.
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let calls = calls.lock().unwrap().clone();
    let top = cache.hot_keys();
    assert_eq!(top.len(), stampede::DEFAULT_HOT_KEYS);
    let hottest = &top[0];
    assert_eq!(hottest.key, 0);
    let truth = calls[&0];
    assert!(
        hottest.misses.abs_diff(truth) * 10 <= truth,
        "{} misses counted, {truth} made",
        hottest.misses
    );
    assert_eq!(hottest.origin_calls, hottest.misses);
    assert!(hottest.last_recompute.is_some());
    assert_eq!(cache.stats().misses, 50_000);
}

#[tokio::test(start_paused = true)]
async fn a_hot_keys_fresh_hits_are_estimated_from_a_sample() {
    let policy = Policy::builder("hot-hits")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u64, u64> = Cache::new(policy);
    // Twenty keys, key 0 the most called: all of them held, each missing once.
    let mut keys = testkit::Skewed::new(5);
    let mut hits = HashMap::<u64, u64>::new();
    for _ in 0..40_000 {
        let key = keys.next_key() % 20;
        if cache.peek(&key).is_some() {
            *hits.entry(key).or_default() += 1;
        }
        cache
            .load(key, move || async move { Ok(key) })
            .await
            .unwrap();
    }
    let top = cache.hot_keys();
    let hottest = top.iter().find(|hot| hot.key == 0).expect("key 0 held");
    let truth = hits[&0];
    assert!(
        hottest.hits.abs_diff(truth) * 5 <= truth,
        "{} hits estimated, {truth} made",
        hottest.hits
    );
    assert_eq!((hottest.misses, hottest.origin_calls), (1, 1));
    let estimated: u64 = top.iter().map(|hot| hot.hits).sum();
    let made: u64 = hits.values().sum();
    assert!(
        estimated.abs_diff(made) * 5 <= made,
        "{estimated} of {made}"
    );
}
