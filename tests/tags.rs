//! Tags: one invalidation retires every entry carrying the tag, in every cache of a
//! runtime and on every replica, at a cost that does not grow with the entries; a load
//! running when its tag moves answers its callers and stores nothing. On memory, on a
//! real `redis-server` (redis and tiered backends, two replicas, an outage) and on a
//! three-master cluster (skipped, loudly, without `redis-server`).
use crate::common;

use common::{bounded, eventually, patient_replica, AppError, DEADLINE};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{RedisCluster, RedisServer};
use tokio::sync::Semaphore;

/// Keyed by (tenant, id); each entry is tagged with its tenant.
type Tenants = Cache<(u64, u64), String, AppError>;

fn tenants(runtime: &Runtime, name: &str) -> Tenants {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy)
        .runtime(runtime)
        .tags(|&(tenant, _): &(u64, u64), _: &String| [format!("tenant:{tenant}")])
        .build()
}

/// An origin that counts its calls; `gate`, when set, holds each call until released.
#[derive(Clone, Default)]
struct Origin {
    calls: Arc<AtomicUsize>,
    gate: Option<(Arc<Semaphore>, Arc<Semaphore>)>,
}

impl Origin {
    fn gated() -> Self {
        Origin {
            calls: Arc::default(),
            gate: Some((Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)))),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn load(&self, cache: &Tenants, key: (u64, u64)) -> String {
        let origin = self.clone();
        bounded(cache.load(key, move || async move {
            let call = origin.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some((started, release)) = &origin.gate {
                started.add_permits(1);
                release.acquire().await.unwrap().forget();
            }
            Ok(format!("{key:?} #{call}"))
        }))
        .await
        .unwrap()
    }

    /// [`Origin::load`] as a task of its own, for a load the test holds while it acts.
    fn spawn_load(&self, cache: &Tenants, key: (u64, u64)) -> tokio::task::JoinHandle<String> {
        let (origin, cache) = (self.clone(), cache.clone());
        tokio::spawn(async move { origin.load(&cache, key).await })
    }

    async fn started(&self) {
        let (started, _) = self.gate.as_ref().unwrap();
        bounded(started.acquire()).await.unwrap().forget();
    }

    fn release(&self) {
        self.gate.as_ref().unwrap().1.add_permits(1);
    }
}

fn memory() -> Runtime {
    Runtime::builder().build().unwrap()
}

fn received(runtime: &Runtime) -> u64 {
    runtime
        .backend_stats()
        .map_or(0, |stats| stats.notices_received)
}

/// Waits until `runtime` has heard one notice beyond `before`.
async fn heard_after(runtime: &Runtime, before: u64) {
    eventually(|| received(runtime) > before).await;
}

async fn subscribed(runtime: &Runtime) {
    eventually(|| {
        runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed)
    })
    .await;
}

/// `invalidate_tag` takes the `String` a `format!` makes, a `&String` or a `&str`, on a
/// runtime and on a cache alike.
#[tokio::test]
async fn a_tag_is_a_string_or_a_str_at_every_entry_point() {
    let runtime = memory();
    let prices = tenants(&runtime, "prices");
    let origin = Origin::default();
    let tag = |tenant: u64| format!("tenant:{tenant}");
    for tenant in 1..=6 {
        origin.load(&prices, (tenant, 0)).await;
    }
    runtime.invalidate_tag(tag(1)).await.unwrap();
    runtime.invalidate_tag(&tag(2)).await.unwrap();
    runtime.invalidate_tag("tenant:3").await.unwrap();
    prices.invalidate_tag(tag(4)).await.unwrap();
    prices.invalidate_tag(&tag(5)).await.unwrap();
    for tenant in 1..=5 {
        assert_eq!(prices.peek(&(tenant, 0)), None, "tenant {tenant}");
    }
    assert!(
        prices.peek(&(6, 0)).is_some(),
        "an untouched tenant keeps its entry"
    );
}

#[tokio::test]
async fn a_tag_retires_every_entry_carrying_it_and_no_other() {
    let runtime = memory();
    let (prices, profiles) = (tenants(&runtime, "prices"), tenants(&runtime, "profiles"));
    let origin = Origin::default();
    for id in 0..1000 {
        origin.load(&prices, (7, id)).await;
    }
    origin.load(&profiles, (7, 0)).await;
    origin.load(&prices, (8, 0)).await;
    assert_eq!(origin.calls(), 1002);
    runtime.invalidate_tag("tenant:7").await.unwrap();
    for id in 0..1000 {
        assert_eq!(prices.peek(&(7, id)), None);
    }
    assert_eq!(profiles.peek(&(7, 0)), None, "every cache of the runtime");
    origin.load(&prices, (8, 0)).await;
    assert_eq!(origin.calls(), 1002, "tenant 8 is still a hit");
    origin.load(&prices, (7, 1)).await;
    origin.load(&prices, (7, 1)).await;
    assert_eq!(origin.calls(), 1003, "loaded once more, then a hit");
}

#[tokio::test]
async fn a_cache_s_own_tag_invalidation_leaves_other_caches_alone() {
    let runtime = memory();
    let (prices, profiles) = (tenants(&runtime, "prices"), tenants(&runtime, "profiles"));
    let origin = Origin::default();
    origin.load(&prices, (7, 0)).await;
    origin.load(&profiles, (7, 0)).await;
    prices.invalidate_tag("tenant:7").await.unwrap();
    assert_eq!(prices.peek(&(7, 0)), None);
    assert!(profiles.peek(&(7, 0)).is_some());
    // An untagged cache has nothing to retire.
    let policy = Policy::builder("plain")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let plain: Tenants = Cache::builder(policy).runtime(&runtime).build();
    origin.load(&plain, (7, 0)).await;
    runtime.invalidate_tag("tenant:7").await.unwrap();
    assert!(plain.peek(&(7, 0)).is_some());
}

#[tokio::test]
async fn a_tag_can_come_from_the_value() {
    let runtime = memory();
    let policy = Policy::builder("rows")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let rows: Cache<u64, (String, u64), AppError> = Cache::builder(policy)
        .runtime(&runtime)
        .tags(|_: &u64, (table, _): &(String, u64)| [format!("table:{table}")])
        .build();
    rows.load(1, || async { Ok(("prices".to_owned(), 1)) })
        .await
        .unwrap();
    rows.load(2, || async { Ok(("users".to_owned(), 2)) })
        .await
        .unwrap();
    runtime.invalidate_tag("table:prices").await.unwrap();
    assert_eq!(rows.peek(&1), None);
    assert!(rows.peek(&2).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_running_when_its_tag_moves_answers_but_is_not_stored() {
    let runtime = memory();
    let prices = tenants(&runtime, "prices");
    let origin = Origin::gated();
    let running = origin.spawn_load(&prices, (7, 0));
    origin.started().await;
    runtime.invalidate_tag("tenant:7").await.unwrap();
    origin.release();
    assert_eq!(bounded(running).await.unwrap(), "(7, 0) #1");
    assert_eq!(prices.peek(&(7, 0)), None, "not stored");
    assert_eq!(prices.stats().tag_fenced, 1);
    origin.release();
    assert_eq!(origin.load(&prices, (7, 0)).await, "(7, 0) #2");
    assert_eq!(prices.peek(&(7, 0)).as_deref(), Some("(7, 0) #2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_joins_a_load_after_its_tag_moved_gets_a_new_load() {
    let runtime = memory();
    let prices = tenants(&runtime, "prices");
    let origin = Origin::gated();
    let first = origin.spawn_load(&prices, (7, 0));
    origin.started().await;
    runtime.invalidate_tag("tenant:7").await.unwrap();
    // Joins the running load, which read the source before the invalidation.
    let second = origin.spawn_load(&prices, (7, 0));
    common::eventually(|| prices.stats().coalesced == 1).await;
    origin.release();
    assert_eq!(
        bounded(first).await.unwrap(),
        "(7, 0) #1",
        "asked before: the load's value"
    );
    origin.started().await;
    origin.release();
    assert_eq!(
        bounded(second).await.unwrap(),
        "(7, 0) #2",
        "asked after: a new load"
    );
    assert_eq!(prices.peek(&(7, 0)).as_deref(), Some("(7, 0) #2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_insert_carries_its_tags() {
    let runtime = memory();
    let prices = tenants(&runtime, "prices");
    prices.insert((7, 0), "put".to_owned()).await.unwrap();
    assert!(prices.peek(&(7, 0)).is_some());
    runtime.invalidate_tag("tenant:7").await.unwrap();
    assert_eq!(prices.peek(&(7, 0)), None);
}

/// Two replicas of one shared backend: entries loaded by one are retired for both by the
/// other's tag invalidation, and a load running on one when the other invalidates is not
/// served to anyone afterwards.
async fn across_two_replicas(backend: fn(String) -> Backend) {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        patient_replica(backend(redis.url())),
        patient_replica(backend(redis.url())),
    );
    let (first, second) = (tenants(&one, "prices"), tenants(&other, "prices"));
    let origin = Origin::default();
    for id in 0..20 {
        origin.load(&first, (7, id)).await;
    }
    origin.load(&first, (8, 0)).await;
    // Shared: the other replica reads them without an origin call.
    for id in 0..20 {
        origin.load(&second, (7, id)).await;
    }
    origin.load(&second, (8, 0)).await;
    assert_eq!(origin.calls(), 21);
    subscribed(&one).await;
    subscribed(&other).await;

    let before = received(&one);
    other.invalidate_tag("tenant:7").await.unwrap();
    heard_after(&one, before).await;
    for id in 0..20 {
        origin.load(&first, (7, id)).await;
    }
    assert_eq!(origin.calls(), 41, "each tenant-7 entry loaded again, once");
    for id in 0..20 {
        origin.load(&second, (7, id)).await;
    }
    origin.load(&first, (8, 0)).await;
    origin.load(&second, (8, 0)).await;
    assert_eq!(
        origin.calls(),
        41,
        "reloaded values and tenant 8 are shared hits"
    );

    // A load on one replica running while the other invalidates the tag.
    let gated = Origin::gated();
    let running = gated.spawn_load(&first, (7, 100));
    gated.started().await;
    let before = received(&one);
    other.invalidate_tag("tenant:7").await.unwrap();
    heard_after(&one, before).await;
    gated.release();
    assert_eq!(bounded(running).await.unwrap(), "(7, 100) #1");
    gated.release();
    gated.release();
    assert_eq!(
        gated.load(&second, (7, 100)).await,
        "(7, 100) #2",
        "not served by the other"
    );
    assert_eq!(gated.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_reaches_every_replica_on_redis() {
    across_two_replicas(Backend::redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_reaches_every_replica_s_memory_copies_when_tiered() {
    across_two_replicas(Backend::tiered).await;
}

/// Redis commands of every kind in `stats` (`INFO commandstats`: run since `CONFIG
/// RESETSTAT`), but those a replica sends on its own (heartbeats, the subscriber's checks).
fn commands_run(stats: &str) -> u64 {
    stats
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter(|line| {
            !["ping", "info", "config", "client", "subscribe"]
                .iter()
                .any(|own| line.starts_with(own))
        })
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_costs_the_same_redis_commands_for_1000_entries_as_for_10() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = patient_replica(Backend::redis(redis.url()));
    let prices = tenants(&runtime, "prices");
    let origin = Origin::default();
    // The script loaded once, before counting.
    runtime.invalidate_tag("warm-up").await.unwrap();
    // And the replica's permission probe, sent once it connected, done (its `SCAN` comes
    // last): on a busy machine it could otherwise land inside a count.
    let probed = Instant::now();
    while !redis
        .cli(&["INFO", "commandstats"])
        .contains("cmdstat_scan")
        && probed.elapsed() < DEADLINE
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut cost = Vec::new();
    for (tenant, entries) in [(1, 10), (2, 1000)] {
        for id in 0..entries {
            origin.load(&prices, (tenant, id)).await;
        }
        redis.cli(&["CONFIG", "RESETSTAT"]);
        runtime
            .invalidate_tag(format!("tenant:{tenant}"))
            .await
            .unwrap();
        // Kept whole: a count on a busy machine once saw 12 commands for 6, cause unknown,
        // and the stats print when the two counts differ.
        let stats = redis.cli(&["INFO", "commandstats"]);
        cost.push((commands_run(&stats), stats));
        for id in [0, entries - 1] {
            let calls = origin.calls();
            origin.load(&prices, (tenant, id)).await;
            assert_eq!(origin.calls(), calls + 1, "retired");
        }
    }
    let [(ten, ten_stats), (thousand, thousand_stats)] = &cost[..] else {
        unreachable!("two counts")
    };
    assert_eq!(
        ten, thousand,
        "commands for 10 and for 1000 entries:\n{ten_stats}\n{thousand_stats}"
    );
    // One script: EVALSHA, and the TIME, GET, PTTL, SET and PUBLISH it runs.
    assert!(*ten <= 6, "{ten} commands: {ten_stats}");
}

/// A replica whose Redis the test black-holes (through the proxy), with a tagged cache
/// that stays in its memory; and a patient replica straight to Redis, with the same cache
/// on Redis.
fn cut_and_direct(redis: &RedisServer) -> (Runtime, Tenants, Runtime, Tenants) {
    let cut = Runtime::builder()
        .backend(Backend::redis(redis.url()))
        .build()
        .unwrap();
    let policy = Policy::builder("prices")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let here = Cache::builder(policy)
        .runtime(&cut)
        .local()
        .tags(|&(tenant, _): &(u64, u64), _: &String| [format!("tenant:{tenant}")])
        .build();
    let direct = patient_replica(Backend::redis(redis.direct_url()));
    let there = tenants(&direct, "prices");
    (cut, here, direct, there)
}

/// Loads `key` into `here` until memory keeps it: loads that ran while `cut` was first
/// subscribing may not be stored (tags read then are not trusted once notices flow).
async fn kept_here(cut: &Runtime, here: &Tenants, origin: &Origin, key: (u64, u64)) {
    origin.load(here, key).await;
    subscribed(cut).await;
    bounded(async {
        while here.peek(&key).is_none() {
            origin.load(here, key).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_invalidated_during_an_outage_applies_here_and_is_replayed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (cut, here, direct, there) = cut_and_direct(&redis);
    let origin = Origin::default();
    kept_here(&cut, &here, &origin, (7, 0)).await;
    origin.load(&there, (7, 0)).await;
    origin.load(&there, (8, 0)).await;
    subscribed(&direct).await;

    redis.black_hole();
    let outage = bounded(cut.invalidate_tag("tenant:7")).await;
    assert!(
        matches!(outage, Err(stampede::Error::Backend { .. })),
        "{outage:?}"
    );
    assert_eq!(here.peek(&(7, 0)), None, "applied here at once");
    assert!(cut.backend_stats().unwrap().invalidations_queued >= 1);

    let before = received(&direct);
    redis.heal();
    heard_after(&direct, before).await;
    eventually(|| {
        cut.backend_stats()
            .is_some_and(|stats| stats.invalidations_queued == 0)
    })
    .await;
    let calls = origin.calls();
    origin.load(&there, (7, 0)).await;
    assert_eq!(
        origin.calls(),
        calls + 1,
        "the replayed tag reached the other replica"
    );
    origin.load(&there, (8, 0)).await;
    assert_eq!(origin.calls(), calls + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_invalidation_dropped_midway_is_still_sent() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (cut, here, direct, there) = cut_and_direct(&redis);
    let origin = Origin::default();
    kept_here(&cut, &here, &origin, (7, 0)).await;
    origin.load(&there, (7, 0)).await;
    subscribed(&direct).await;
    // The caller gives up while its call is on its way (a request dropped, a timeout).
    redis.black_hole();
    let dropped =
        tokio::time::timeout(Duration::from_millis(20), cut.invalidate_tag("tenant:7")).await;
    assert!(dropped.is_err(), "dropped before Redis answered");
    assert_eq!(here.peek(&(7, 0)), None, "applied here at once");
    let before = received(&direct);
    redis.heal();
    heard_after(&direct, before).await;
    let calls = origin.calls();
    origin.load(&there, (7, 0)).await;
    assert_eq!(
        origin.calls(),
        calls + 1,
        "the dropped invalidation reached the other replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_reaches_entries_on_every_shard_of_a_cluster() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let (one, other) = (
        patient_replica(Backend::redis_cluster(cluster.node_urls())),
        patient_replica(Backend::tiered_cluster(cluster.node_urls())),
    );
    let (first, second) = (tenants(&one, "spread"), tenants(&other, "spread"));
    let origin = Origin::default();
    for id in 0..60 {
        origin.load(&first, (7, id)).await;
    }
    let pattern = "stampede:3:{spread:*";
    let per_master: Vec<usize> = (0..3)
        .map(|i| {
            cluster
                .cli(i, &["--scan", "--pattern", pattern])
                .lines()
                .count()
        })
        .collect();
    assert!(
        per_master.iter().all(|&n| n > 0),
        "entries on every master: {per_master:?}"
    );
    for id in 0..60 {
        origin.load(&second, (7, id)).await;
    }
    assert_eq!(origin.calls(), 60);
    subscribed(&other).await;
    let before = received(&other);
    one.invalidate_tag("tenant:7").await.unwrap();
    heard_after(&other, before).await;
    for id in 0..60 {
        origin.load(&second, (7, id)).await;
    }
    assert_eq!(
        origin.calls(),
        120,
        "every entry, on every shard, loaded again once"
    );
}

/// Many callers read while a writer changes the source and invalidates its tag, over and
/// over: no call that starts after an invalidation returned gets a value read before it.
/// The source's version only grows; the writer publishes the version it wrote once its
/// `invalidate_tag` returned, and each reader asserts its answer is at least the version
/// published when its call started.
async fn no_call_after_a_tag_moved_gets_an_older_value(runtime: Runtime) {
    use std::sync::atomic::AtomicU64;
    const READERS: usize = 8;
    const WRITES: u64 = 60;
    let source = Arc::new(AtomicU64::new(0));
    let committed = Arc::new(AtomicU64::new(0));
    let policy = Policy::builder("versions")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u64, u64, AppError> = Cache::builder(policy)
        .runtime(&runtime)
        .tags(|key: &u64, _: &u64| [format!("shard:{}", key % 2)])
        .build();
    let writer = {
        let (runtime, source, committed) = (runtime.clone(), source.clone(), committed.clone());
        tokio::spawn(async move {
            for _ in 0..WRITES {
                let written = source.fetch_add(1, Ordering::SeqCst) + 1;
                bounded(runtime.invalidate_tag("shard:0")).await.unwrap();
                committed.store(written, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let readers: Vec<_> = (0..READERS)
        .map(|reader| {
            let (cache, source, committed) = (cache.clone(), source.clone(), committed.clone());
            tokio::spawn(async move {
                let mut checked = 0u64;
                while committed.load(Ordering::SeqCst) < WRITES {
                    let floor = committed.load(Ordering::SeqCst);
                    let key = (reader as u64 % 2) * 2; // tagged shard:0
                    let source = source.clone();
                    // Origins of different lengths, so loads overlap the writes anyhow.
                    let length = Duration::from_micros((reader as u64 * 7919 + checked) % 3000);
                    let got = bounded(cache.load(key, move || async move {
                        let read = source.load(Ordering::SeqCst);
                        tokio::time::sleep(length).await;
                        Ok(read)
                    }))
                    .await
                    .unwrap();
                    assert!(
                        got >= floor,
                        "a call started after version {floor} was committed got {got}"
                    );
                    checked += 1;
                    // A fresh hit never waits: let the writer run.
                    tokio::task::yield_now().await;
                }
                checked
            })
        })
        .collect();
    bounded(writer).await.unwrap();
    let mut calls = 0;
    for reader in readers {
        calls += bounded(reader).await.unwrap();
    }
    assert!(calls > WRITES, "{calls} calls checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_tag_moved_gets_an_older_value_in_memory() {
    no_call_after_a_tag_moved_gets_an_older_value(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_tag_moved_gets_an_older_value_when_tiered() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = patient_replica(Backend::tiered(redis.url()));
    no_call_after_a_tag_moved_gets_an_older_value(runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_unreachable_a_tagged_value_is_kept_for_the_degraded_bound() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cut = Runtime::builder()
        .backend(Backend::tiered(redis.url()))
        .build()
        .unwrap();
    let policy = Policy::builder("prices")
        .fresh(Duration::from_secs(60))
        .stale(Duration::from_secs(30))
        .build()
        .unwrap();
    let prices: Tenants = Cache::builder(policy)
        .runtime(&cut)
        .tags(|&(tenant, _): &(u64, u64), _: &String| [format!("tenant:{tenant}")])
        .build();
    let origin = Origin::default();
    origin.load(&prices, (7, 0)).await;
    subscribed(&cut).await;
    redis.black_hole();
    eventually(|| cut.backend_stats().is_some_and(|stats| stats.degraded_now)).await;
    // Neither the value nor its tag can be read: loaded here, and kept as an untagged
    // value would be (for the degraded bound), not loaded again on every call.
    let calls = origin.calls();
    origin.load(&prices, (7, 1)).await;
    origin.load(&prices, (7, 1)).await;
    assert_eq!(origin.calls(), calls + 1);
    // This replica's own tag invalidation still retires it.
    let queued = bounded(cut.invalidate_tag("tenant:7")).await;
    assert!(queued.is_err(), "{queued:?}");
    assert_eq!(prices.peek(&(7, 1)), None);
}
