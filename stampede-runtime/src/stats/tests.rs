use super::*;

#[test]
fn timers_keep_the_sum_and_the_longest() {
    let counters = Counters::default();
    counters.admission_wait.record(Duration::from_millis(30));
    counters.admission_wait.record(Duration::from_millis(120));
    counters.admission_wait.record(Duration::from_millis(50));
    counters.oldest_stale_served.record(Duration::from_secs(4));
    counters.oldest_stale_served.record(Duration::from_secs(2));
    let stats = counters.snapshot(0, 0);
    assert_eq!(stats.admission_wait_total, Duration::from_millis(200));
    assert_eq!(stats.admission_wait_max, Duration::from_millis(120));
    assert_eq!(stats.oldest_stale_served, Duration::from_secs(4));
}

#[test]
fn stats_serialize_field_by_field_for_export() {
    let stats = Stats {
        fresh_hits: 5,
        origin_calls: 2,
        ..Stats::default()
    };
    let config = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(stats, config).unwrap();
    let ((fresh, stale, misses, coalesced, origin), _): ((u64, u64, u64, u64, u64), _) =
        bincode::serde::decode_from_slice(&bytes, config).unwrap();
    assert_eq!((fresh, stale, misses, coalesced, origin), (5, 0, 0, 0, 2));
}
