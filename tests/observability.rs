//! What the cache tells operators: one tracing span per origin load (cache, outcome,
//! duration), one per waiter that follows from the load it waited for, and the admission
//! counters in `stats()`.
use crate::common;

use common::{bounded, AppError, Origin};
use stampede::{Cache, Clock, Policy, Runtime};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const MS: Duration = Duration::from_millis(1);

/// Every span (name and fields, as last recorded) in the order they opened, and every
/// event this test produced.
#[derive(Clone, Default)]
struct Recorded {
    spans: Arc<Mutex<Spans>>,
    events: Arc<Mutex<Vec<Fields>>>,
}

#[derive(Default)]
struct Spans {
    opened: Vec<(String, Fields)>,
    /// Span ids are reused once a span closes: each id's latest span.
    by_id: BTreeMap<u64, usize>,
    /// (span, the span it follows from), as indexes into `opened`.
    follows: Vec<(usize, usize)>,
}

type Fields = BTreeMap<String, String>;

struct Collect(Fields);

impl Visit for Collect {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorded {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Collect(Fields::new());
        attrs.record(&mut fields);
        let name = attrs.metadata().name().to_owned();
        let mut spans = self.spans.lock().unwrap();
        let at = spans.opened.len();
        spans.by_id.insert(id.into_u64(), at);
        spans.opened.push((name, fields.0));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        let at = spans.by_id[&id.into_u64()];
        let (_, fields) = &mut spans.opened[at];
        let mut more = Collect(std::mem::take(fields));
        values.record(&mut more);
        *fields = more.0;
    }
    fn on_follows_from(&self, span: &Id, follows: &Id, _: Context<'_, S>) {
        let mut spans = self.spans.lock().unwrap();
        let link = (
            spans.by_id[&span.into_u64()],
            spans.by_id[&follows.into_u64()],
        );
        spans.follows.push(link);
    }
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Collect(Fields::new());
        event.record(&mut fields);
        self.events.lock().unwrap().push(fields.0);
    }
}

impl Recorded {
    fn loads(&self) -> Vec<Fields> {
        let spans = self.spans.lock().unwrap();
        spans
            .opened
            .iter()
            .filter(|(name, _)| name == "origin_load")
            .map(|(_, fields)| fields.clone())
            .collect()
    }

    /// For each span named `name`, the name and fields of the span it follows from.
    fn followed_by(&self, name: &str) -> Vec<Option<(String, Fields)>> {
        let spans = self.spans.lock().unwrap();
        (spans.opened.iter().enumerate())
            .filter(|(_, (opened, _))| opened == name)
            .map(|(at, _)| {
                let link = spans.follows.iter().find(|(span, _)| *span == at);
                link.map(|(_, follows)| spans.opened[*follows].clone())
            })
            .collect()
    }

    fn events_saying(&self, message: &str) -> usize {
        let events = self.events.lock().unwrap();
        events
            .iter()
            .filter(|e| e.get("message").map(String::as_str) == Some(message))
            .count()
    }
}

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn each_origin_load_is_one_span_and_each_waiters_span_follows_from_it() {
    let recorded = Recorded::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorded.clone()));
    let runtime = Runtime::builder()
        .admission("db", 1, 50 * MS)
        .build()
        .unwrap();
    let policy = Policy::builder("traced")
        .fresh(60_000 * MS)
        .admission("db")
        .build()
        .unwrap();
    let cache: Cache<u32, usize, AppError> = Cache::builder(policy)
        .clock(Clock::tokio())
        .runtime(&runtime)
        .build();
    let origin = Origin::default();
    let load = |key: u32, fail: bool| {
        let (cache, origin) = (cache.clone(), origin.clone());
        tokio::spawn(async move {
            cache
                .load(key, move || async move {
                    let call = origin.slow(100 * MS).await;
                    if fail {
                        Err(AppError::Down(call))
                    } else {
                        Ok(call)
                    }
                })
                .await
        })
    };
    let callers: Vec<_> = (0..10).map(|_| load(1, false)).collect();
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap(), Ok(1));
    }
    let load_of_key_1 = (
        "origin_load".to_owned(),
        fields(&[
            ("cache", "traced"),
            ("outcome", "loaded"),
            ("duration_ms", "100"),
        ]),
    );
    assert_eq!(
        recorded.followed_by("coalesced_wait"),
        vec![Some(load_of_key_1); 9],
        "one span per waiter, each following from the one load"
    );
    assert_eq!(
        bounded(load(2, true)).await.unwrap(),
        Err(AppError::Down(2))
    );
    // One permit, held for 100 ms: key 4 queues 50 ms and is shed.
    let holder = load(3, false);
    tokio::task::yield_now().await;
    assert!(bounded(load(4, false)).await.unwrap().is_err());
    bounded(holder).await.unwrap().unwrap();

    assert_eq!(
        recorded.loads(),
        [
            fields(&[
                ("cache", "traced"),
                ("outcome", "loaded"),
                ("duration_ms", "100")
            ]),
            fields(&[
                ("cache", "traced"),
                ("outcome", "failed"),
                ("duration_ms", "100")
            ]),
            fields(&[
                ("cache", "traced"),
                ("outcome", "loaded"),
                ("duration_ms", "100")
            ]),
            fields(&[
                ("cache", "traced"),
                ("outcome", "shed"),
                ("duration_ms", "50")
            ]),
        ],
        "one span per leader, in the order they started"
    );
    assert_eq!(
        recorded.events_saying("waiting for the running load of this key"),
        9,
        "one event per waiter"
    );
    let stats = cache.stats();
    assert_eq!((stats.admitted, stats.shed), (3, 1));
    assert_eq!(stats.admission_wait_max, 50 * MS);
    assert_eq!(
        stats.admission_wait_total,
        50 * MS,
        "the others found a free permit"
    );
}

#[tokio::test]
async fn a_wait_for_another_replicas_load_is_a_span_naming_that_replica() {
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let recorded = Recorded::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorded.clone()));
    // Patient with Redis: a call timed out on a busy machine would load here instead.
    let replica = || common::patient_replica(stampede::Backend::redis(redis.url()));
    let (owner, other) = (replica(), replica());
    let policy = || {
        Policy::builder("traced-fleet")
            .fresh(60_000 * MS)
            .build()
            .unwrap()
    };
    let owning: Cache<u32, u32, AppError> = Cache::builder(policy()).runtime(&owner).build();
    let waiting: Cache<u32, u32, AppError> = Cache::builder(policy()).runtime(&other).build();
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    let held = tokio::spawn({
        let (entered, release) = (entered.clone(), release.clone());
        async move {
            owning
                .load(1, move || async move {
                    entered.notify_one();
                    release.notified().await;
                    Ok(7)
                })
                .await
        }
    });
    bounded(entered.notified()).await;
    let waiter = tokio::spawn({
        let waiting = waiting.clone();
        async move { waiting.load(1, || async { Ok(8) }).await }
    });
    common::eventually(|| waiting.stats().lease_waits == 1).await;
    release.notify_one();
    assert_eq!(bounded(held).await.unwrap(), Ok(7));
    // The owner's beats keep its lease; a machine that starves them past the waiter's
    // patience (300 ms) has the waiter take it over and load too, as documented.
    let answer = bounded(waiter).await.unwrap();
    let took_over = waiting.stats().lease_takeovers;
    if took_over == 0 {
        assert_eq!(answer, Ok(7), "the owner's value");
    }
    let id = owner.replica_id().expect("connected");
    let waits: Vec<Fields> = {
        let spans = recorded.spans.lock().unwrap();
        (spans.opened.iter())
            .filter(|(name, _)| name == "lease_wait")
            .map(|(_, fields)| fields.clone())
            .collect()
    };
    assert_eq!(
        waits,
        [fields(&[("cache", "traced-fleet"), ("owner", &id[..8])])],
        "one span for the wait, naming the replica that held the lease"
    );
    let loaded: Vec<Fields> = (recorded.loads().into_iter())
        .filter(|load| load.get("outcome").map(String::as_str) == Some("loaded"))
        .collect();
    assert_eq!(
        loaded.len() as u64,
        1 + took_over,
        "one origin call, the owner's (and one per takeover): {:?}",
        recorded.loads()
    );
}

/// A negative source version (an `i64` column) cannot be ordered: the value is still
/// served and stored, and a warning names the cache, once per load; an invalidation at
/// one applies as `invalidate` and says so too.
#[tokio::test]
async fn a_negative_source_version_is_a_warning_naming_the_cache() {
    let recorded = Recorded::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(recorded.clone()));
    let runtime = Runtime::builder().build().unwrap();
    let policy = Policy::builder("signed-rows")
        .fresh(60_000 * MS)
        .build()
        .unwrap();
    let cache: Cache<u32, i64, AppError> = Cache::builder(policy)
        .runtime(&runtime)
        .source_version(|version: &i64| *version)
        .build();
    for _ in 0..2 {
        let value = bounded(cache.load(1, || async { Ok(-7) })).await;
        assert_eq!(value, Ok(-7));
    }
    assert_eq!(cache.stats().origin_calls, 1, "stored: the second call hit");
    let stored = "a negative source version cannot be ordered: the value is stored without one";
    assert_eq!(recorded.events_saying(stored), 1);
    let events = recorded.events.lock().unwrap().clone();
    let warning = events.iter().find(|e| e["message"] == stored).unwrap();
    assert_eq!(warning["cache"], "signed-rows");
    assert_eq!(warning["version"], "-7");
    bounded(cache.invalidate_at(&1, -1_i64)).await.unwrap();
    assert_eq!(cache.peek(&1), None);
    let invalidated = "a negative source version cannot be ordered: invalidated as by `invalidate`";
    assert_eq!(recorded.events_saying(invalidated), 1);
}
