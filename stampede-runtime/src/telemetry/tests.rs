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
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        // A histogram's slot counts its samples.
        Histogram::from_arc(Arc::new(Samples(self.slot(key))))
    }
}

struct Samples(Arc<AtomicU64>);

impl metrics::HistogramFn for Samples {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The process's recorder, for what is recorded off the test's thread (the interval
/// export on the background threads) or inside a load (the histograms): installed once.
fn global() -> &'static Kept {
    static KEPT: std::sync::OnceLock<&'static Kept> = std::sync::OnceLock::new();
    KEPT.get_or_init(|| {
        let kept: &'static Kept = Box::leak(Box::default());
        metrics::set_global_recorder(kept).expect("the only global recorder of the unit tests");
        kept
    })
}

impl Kept {
    fn names(&self) -> std::collections::BTreeSet<String> {
        let kept = self.0.lock().unwrap();
        kept.keys()
            .map(|key| key.split('{').next().unwrap().to_owned())
            .collect()
    }

    fn get(&self, name: &str) -> Option<u64> {
        Some(self.0.lock().unwrap().get(name)?.load(Ordering::Relaxed))
    }
}

async fn eventually(mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_export_on_their_own_and_histograms_as_they_happen() {
    let kept = global();
    let runtime = Runtime::builder()
        .metrics_interval(Duration::from_millis(20))
        .build()
        .unwrap();
    let policy = Policy::builder("exported-on-its-own")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = Cache::builder(policy).runtime(&runtime).build();
    for key in [1, 2, 1] {
        cache
            .load(key, move || async move { Ok(key) })
            .await
            .unwrap();
    }
    eventually(|| {
        kept.get("stampede_misses_total{cache=exported-on-its-own}") == Some(2)
            && kept.get("stampede_fresh_hits_total{cache=exported-on-its-own}") == Some(1)
    })
    .await;
    let samples = |name: &str| kept.get(name).unwrap_or(0);
    assert_eq!(
        samples("stampede_origin_seconds{cache=exported-on-its-own,outcome=loaded}"),
        2
    );
    assert_eq!(
        samples("stampede_miss_wait_seconds{cache=exported-on-its-own,outcome=ok}"),
        2
    );
}

/// Every name the observability guide lists is exported, and nothing it does not list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exported_names_are_the_documented_ones() {
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let kept = global();
    let runtime = Runtime::builder()
        .backend(crate::Backend::tiered(redis.url()))
        .admission("db", 2, Duration::from_secs(1))
        // Fleet-wide, so its gauges are exported too.
        .admission_fleet_wide("db", None)
        .metrics_interval(Duration::ZERO)
        .build()
        .unwrap();
    let policy = Policy::builder("documented")
        .fresh(Duration::from_secs(60))
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, u32> = Cache::builder(policy).runtime(&runtime).build();
    cache.load(1, || async { Ok(1) }).await.unwrap();
    metrics::with_local_recorder(kept, || runtime.export_metrics());
    let guide = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/observability.md"
    ))
    .unwrap();
    let documented: std::collections::BTreeSet<String> = guide
        .lines()
        .filter_map(|line| line.strip_prefix("| `stampede_"))
        .map(|rest| format!("stampede_{}", rest.split('`').next().unwrap()))
        .collect();
    assert_eq!(kept.names(), documented);
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
    // A detached load's task lets go of the cache a moment after its caller was
    // answered: give the tasks a bounded number of turns (CI once exported it once more).
    let mut exported_after_drop = true;
    for _ in 0..100 {
        let after = Kept::default();
        metrics::with_local_recorder(&after, || runtime.export_metrics());
        exported_after_drop = (after.0.lock().unwrap())
            .keys()
            .any(|k| k.contains("cache="));
        if !exported_after_drop {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        !exported_after_drop,
        "a dropped cache is no longer exported"
    );
}
