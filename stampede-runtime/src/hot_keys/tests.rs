use super::*;

#[test]
fn the_key_with_most_of_the_traffic_tops_the_list_with_its_exact_count() {
    let hot = HotKeys::new(DEFAULT_HOT_KEYS);
    let mut keys = testkit::Skewed::new(7);
    let mut truth = HashMap::new();
    for _ in 0..100_000 {
        let key = keys.next_key();
        hot.miss(&key);
        hot.origin_call(&key, Duration::from_millis(3));
        *truth.entry(key).or_insert(0u64) += 1;
    }
    let top = hot.top();
    assert_eq!(top.len(), DEFAULT_HOT_KEYS, "bounded by k");
    assert_eq!(top[0].key, 0);
    let true_misses = truth[&0];
    assert!(
        top[0].misses.abs_diff(true_misses) * 10 <= true_misses,
        "{} misses counted, {true_misses} made",
        top[0].misses
    );
    assert_eq!(top[0].error, 0, "held since its first miss");
    assert_eq!(top[0].last_recompute, Some(Duration::from_millis(3)));
    // The next keys by true count (Zipf's heads) are held too.
    let mut by_count: Vec<(u64, u64)> = truth.into_iter().map(|(k, n)| (n, k)).collect();
    by_count.sort_unstable_by(|a, b| b.cmp(a));
    for (_, key) in &by_count[..4] {
        assert!(top.iter().any(|hot| hot.key == *key), "key {key} missing");
    }
}

#[test]
fn hits_and_joins_update_held_keys_but_never_enter() {
    let hot = HotKeys::new(2);
    hot.sampled_hit(&1u64);
    hot.coalesced(&1);
    assert!(hot.top().is_empty());
    hot.miss(&1);
    hot.coalesced(&1);
    hot.sampled_hit(&1);
    let top = hot.top();
    assert_eq!(
        (top[0].misses, top[0].coalesced, top[0].hits),
        (1, 1, HIT_SAMPLE)
    );
}

#[test]
fn a_newcomer_replaces_the_least_counted_key_and_inherits_its_count() {
    let hot = HotKeys::new(2);
    for _ in 0..3 {
        hot.miss(&"a");
    }
    hot.miss(&"b");
    hot.miss(&"c");
    let top = hot.top();
    let keys: Vec<&str> = top.iter().map(|hot| hot.key).collect();
    assert_eq!(keys, ["a", "c"]);
    assert_eq!((top[1].misses, top[1].error), (1, 1));
}

#[test]
fn most_origin_calls_come_first() {
    let hot = HotKeys::new(4);
    for _ in 0..5 {
        hot.miss(&1u64);
    }
    hot.miss(&2);
    hot.origin_call(&2, Duration::from_millis(1));
    assert_eq!(hot.top()[0].key, 2);
}

#[test]
fn zero_keys_keeps_nothing() {
    let hot = HotKeys::new(0);
    hot.miss(&1u64);
    hot.origin_call(&1, Duration::ZERO);
    assert!(hot.top().is_empty());
}
