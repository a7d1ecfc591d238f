use crate::{Cache, Clock, Policy, Runtime};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Keeps every counter and gauge by `name{label=value}`.
#[derive(Default)]
struct Kept(Mutex<BTreeMap<String, Arc<AtomicU64>>>);

impl Kept {
    fn slot(&self, key: &Key) -> Arc<AtomicU64> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.0.lock().unwrap().entry(name).or_default().clone()
    }

    fn counter(&self, name: &str) -> u64 {
        self.0.lock().unwrap()[name].load(Ordering::Relaxed)
    }

    fn gauge(&self, name: &str) -> f64 {
        f64::from_bits(self.0.lock().unwrap()[name].load(Ordering::Relaxed))
    }
}

impl Recorder for Kept {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.slot(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[tokio::test(start_paused = true)]
async fn export_publishes_each_caches_counters_and_each_semaphore() {
    let runtime = Runtime::builder()
        .admission("db", 4, Duration::from_secs(1))
        .build()
        .unwrap();
    let policy = Policy::builder("exported")
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = Cache::builder(policy)
        .clock(Clock::tokio())
        .runtime(&runtime)
        .build();
    for key in [1, 2, 1, 1] {
        cache
            .load(key, move || async move { Ok(key) })
            .await
            .unwrap();
    }
    let kept = Kept::default();
    metrics::with_local_recorder(&kept, || runtime.export_metrics());
    let counter = |name: &str| kept.counter(&format!("{name}{{cache=exported}}"));
    assert_eq!(counter("stampede_fresh_hits_total"), 2);
    assert_eq!(counter("stampede_misses_total"), 2);
    assert_eq!(counter("stampede_origin_calls_total"), 2);
    assert_eq!(counter("stampede_admitted_total"), 2);
    assert_eq!(counter("stampede_shed_total"), 0);
    assert_eq!(kept.gauge("stampede_in_flight{cache=exported}"), 0.0);
    assert_eq!(kept.gauge("stampede_admission_limit{admission=db}"), 4.0);
    assert_eq!(kept.gauge("stampede_admission_in_use{admission=db}"), 0.0);
    drop(cache);
    let after = Kept::default();
    metrics::with_local_recorder(&after, || runtime.export_metrics());
    assert!(
        after
            .0
            .lock()
            .unwrap()
            .keys()
            .all(|k| !k.contains("cache=")),
        "a dropped cache is no longer exported"
    );
}
