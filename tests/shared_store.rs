//! The redis and tiered backends against a real `redis-server` that each test starts for
//! itself (skipped, loudly, without one; `STAMPEDE_REQUIRE_REDIS=1` makes that a failure).
//! Each `Runtime` is one replica: its own connections, memory and flights.
use crate::common;

use common::{bounded, eventually, run_child, AppError, ConfigFile, DEADLINE, REPORT};
use serde::{Deserialize, Serialize};
use stampede::{cached, Backend, Cache, Error, Policy, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::RedisServer;

/// A replica patient with Redis: these tests count origin calls across replicas, which a
/// Redis call timed out on a starved machine would add (see [`common::patient_replica`]).
fn replica(backend: Backend) -> Runtime {
    common::patient_replica(backend)
}

/// A replica with the default response timeout (250 ms), for the tests of what a slow or
/// unreachable Redis costs.
fn hurried(backend: Backend) -> Runtime {
    Runtime::builder().backend(backend).build().unwrap()
}

fn cache(runtime: &Runtime, name: &str) -> Cache<u64, String, AppError> {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy).runtime(runtime).build()
}

/// An origin that counts its calls and answers `value`.
#[derive(Clone, Default)]
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn calls(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    async fn load(
        &self,
        cache: &Cache<u64, String, AppError>,
        key: u64,
        value: &str,
    ) -> Result<String, AppError> {
        let calls = self.0.clone();
        let value = value.to_owned();
        bounded(cache.load(key, move || async move {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(value)
        }))
        .await
    }
}

/// Awaits a tiered node's subscription. Its memory copies made before it was up are
/// dropped when it comes up (notices may have been missed), so a test that counts memory
/// hits starts after that: a probe key's copy, made once the subscription is up, must
/// survive a moment (the drop runs on a listener task, soon after the flag flips).
async fn subscribed(runtime: &Runtime, cache: &Cache<u64, String, AppError>) {
    const PROBE: u64 = u64::MAX;
    let probe = || async { Ok::<_, AppError>("probe".to_owned()) };
    bounded(cache.load(PROBE, probe)).await.unwrap();
    eventually(|| {
        runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed)
    })
    .await;
    bounded(async {
        loop {
            cache.load(PROBE, probe).await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            if cache.peek(&PROBE).is_some() {
                return;
            }
        }
    })
    .await;
}

/// The keys stored under the default prefix.
fn scan(redis: &RedisServer) -> Vec<String> {
    let out = redis.cli(&["--scan", "--pattern", "stampede:*"]);
    out.lines().map(str::to_owned).collect()
}

fn value_key(redis: &RedisServer, name: &str) -> String {
    scan(redis)
        .into_iter()
        .find(|key| key.contains(name) && key.ends_with('}'))
        .unwrap_or_else(|| panic!("no value key naming {name} in {:?}", scan(redis)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_loaded_by_one_replica_is_served_to_another_without_an_origin_call() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let (first, second) = (cache(&one, "profile"), cache(&other, "profile"));
    let origin = Counted::default();
    assert_eq!(origin.load(&first, 7, "seven").await, Ok("seven".into()));
    assert_eq!(origin.load(&second, 7, "other").await, Ok("seven".into()));
    assert_eq!(origin.load(&second, 7, "other").await, Ok("seven".into()));
    assert_eq!(origin.calls(), 1, "one origin call for the fleet");
    assert_eq!(
        second.stats().shared_hits,
        2,
        "no process memory: each call read Redis"
    );
    assert!(value_key(&redis, "profile").contains(":v0:7}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_cache_never_goes_to_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let policy = Policy::builder("local-only")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let local: Cache<u64, String, AppError> =
        Cache::builder(policy).runtime(&runtime).local().build();
    let origin = Counted::default();
    assert_eq!(origin.load(&local, 1, "one").await, Ok("one".into()));
    assert_eq!(origin.load(&local, 1, "one").await, Ok("one".into()));
    assert_eq!((origin.calls(), local.stats().fresh_hits), (1, 1));
    assert_eq!(scan(&redis), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_during_another_replicas_load_fences_it() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let (loading, invalidating) = (cache(&one, "fenced"), cache(&other, "fenced"));
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let load = tokio::spawn({
        let (loading, release, started) = (loading.clone(), release.clone(), started.clone());
        async move {
            loading
                .load(1, move || async move {
                    started.notify_one();
                    release.notified().await;
                    Ok::<_, AppError>("before".to_owned())
                })
                .await
        }
    });
    bounded(started.notified()).await;
    bounded(invalidating.invalidate(&1)).await.unwrap();
    release.notify_one();
    assert_eq!(
        bounded(load).await.unwrap(),
        Ok("before".into()),
        "its callers still get it"
    );
    let origin = Counted::default();
    assert_eq!(
        origin.load(&invalidating, 1, "after").await,
        Ok("after".into())
    );
    assert_eq!(origin.load(&loading, 1, "again").await, Ok("after".into()));
    assert_eq!(origin.calls(), 1, "the fenced value was never stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_invalidation_reaches_another_nodes_memory() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    );
    let (first, second) = (cache(&one, "tiered"), cache(&other, "tiered"));
    subscribed(&other, &second).await;
    let before = second.stats();
    let origin = Counted::default();
    // The first node's publish notice does not reach the second node, which has no use
    // for key 3 yet: it subscribes to the key's notices before it first reads it.
    assert_eq!(origin.load(&first, 3, "three").await, Ok("three".into()));
    assert_eq!(origin.load(&second, 3, "x").await, Ok("three".into()));
    assert_eq!(origin.load(&second, 3, "x").await, Ok("three".into()));
    let after = second.stats();
    assert_eq!(
        (
            origin.calls(),
            after.shared_hits - before.shared_hits,
            after.fresh_hits - before.fresh_hits
        ),
        (1, 1, 1),
        "the second node read Redis once, then its memory"
    );
    // The notice may race the subscription's start: invalidate until the copy is gone.
    let deadline = Instant::now() + DEADLINE;
    while second.peek(&3).is_some() {
        assert!(
            Instant::now() < deadline,
            "the notice never reached the node"
        );
        first.invalidate(&3).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(origin.load(&second, 3, "new").await, Ok("new".into()));
    assert_eq!(origin.load(&first, 3, "x").await, Ok("new".into()));
    assert_eq!(origin.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_node_that_loses_its_subscription_drops_its_memory_copies() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let node = replica(Backend::tiered(redis.url()));
    let cache = cache(&node, "unconfirmed");
    subscribed(&node, &cache).await;
    let origin = Counted::default();
    assert_eq!(origin.load(&cache, 4, "four").await, Ok("four".into()));
    assert_eq!(cache.peek(&4), Some("four".into()), "a memory copy");
    // Notices sent while it is unsubscribed would be lost: its copies are unconfirmed.
    let deadline = Instant::now() + DEADLINE;
    while cache.peek(&4).is_some() {
        assert!(
            Instant::now() < deadline,
            "the copy outlived the subscription"
        );
        redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        origin.load(&cache, 4, "x").await,
        Ok("four".into()),
        "re-read from Redis"
    );
    assert_eq!(origin.calls(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_foreign_or_untimed_bytes_are_a_miss_never_a_panic() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let cache = cache(&runtime, "corrupt");
    let origin = Counted::default();
    assert_eq!(origin.load(&cache, 5, "five").await, Ok("five".into()));
    let key = value_key(&redis, "corrupt");
    // Garbage: a counted miss, overwritten.
    redis.cli(&["SET", &key, "not an envelope", "PX", "60000"]);
    assert_eq!(origin.load(&cache, 5, "fixed").await, Ok("fixed".into()));
    assert_eq!(
        origin.load(&cache, 5, "x").await,
        Ok("fixed".into()),
        "overwritten"
    );
    // Bytes without a TTL are not ours, whatever they hold: absent, overwritten.
    redis.cli(&["PERSIST", &key]);
    assert_eq!(
        origin.load(&cache, 5, "untimed").await,
        Ok("untimed".into())
    );
    // Another type at our key.
    redis.cli(&["DEL", &key]);
    redis.cli(&["LPUSH", &key, "a list"]);
    assert_eq!(origin.load(&cache, 5, "listed").await, Ok("listed".into()));
    assert_eq!(origin.calls(), 4);
    let stats = runtime.backend_stats().unwrap();
    assert!(stats.decode_failures >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_reaches_every_replica_and_fences_loads_running_elsewhere() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    );
    let (first, second) = (cache(&one, "sweep"), cache(&other, "sweep"));
    // Another cache under the same prefix, and one whose name starts like this one's.
    let (bystander, prefixed) = (cache(&one, "keep"), cache(&one, "sweep-not"));
    let origin = Counted::default();
    for key in 0..50 {
        origin.load(&first, key, "old").await.unwrap();
        origin.load(&second, key, "unused").await.unwrap();
    }
    origin.load(&bystander, 1, "kept").await.unwrap();
    origin.load(&prefixed, 1, "kept").await.unwrap();
    assert_eq!(
        origin.calls(),
        52,
        "the second replica was served from Redis"
    );
    // A load running on the second replica across the sweep.
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(tokio::sync::Notify::new());
    let load = tokio::spawn({
        let (second, release, started) = (second.clone(), release.clone(), started.clone());
        async move {
            second
                .load(999, move || async move {
                    started.notify_one();
                    release.notified().await;
                    Ok::<_, AppError>("before the sweep".to_owned())
                })
                .await
        }
    });
    bounded(started.notified()).await;
    bounded(first.invalidate_all()).await.unwrap();
    release.notify_one();
    assert_eq!(bounded(load).await.unwrap(), Ok("before the sweep".into()));
    // Every replica's memory copy is gone (notices), and so is every entry in Redis.
    let fresh = Counted::default();
    eventually(|| (0..50).all(|key| second.peek(&key).is_none())).await;
    for key in 0..50 {
        assert_eq!(fresh.load(&second, key, "new").await, Ok("new".into()));
    }
    assert_eq!(
        fresh.load(&first, 999, "new").await,
        Ok("new".into()),
        "the running load was fenced"
    );
    assert_eq!(fresh.calls(), 51);
    assert_eq!(fresh.load(&bystander, 1, "x").await, Ok("kept".into()));
    assert_eq!(fresh.load(&prefixed, 1, "x").await, Ok("kept".into()));
    assert_eq!(fresh.calls(), 51, "other caches untouched");
}

/// One value type as two builds define it: the same fields, in another order.
mod build_one {
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Price {
        pub net: u64,
        pub gross: u64,
    }
}
mod build_two {
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Price {
        pub gross: u64,
        pub net: u64,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_written_as_another_type_is_a_miss_not_a_misread() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let policy = || {
        Policy::builder("price")
            .fresh(Duration::from_secs(60))
            .build()
            .unwrap()
    };
    // Two builds of one service during a deploy: same cache name and version, and a value
    // type whose bytes the other build would decode without an error, swapped.
    let (old, new) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let old_cache: Cache<u64, build_one::Price, AppError> =
        Cache::builder(policy()).runtime(&old).build();
    let new_cache: Cache<u64, build_two::Price, AppError> =
        Cache::builder(policy()).runtime(&new).build();
    let stored = bounded(old_cache.load(1, || async {
        Ok(build_one::Price {
            net: 100,
            gross: 119,
        })
    }))
    .await;
    assert_eq!(
        stored,
        Ok(build_one::Price {
            net: 100,
            gross: 119
        })
    );
    let read = bounded(new_cache.load(1, || async {
        Ok(build_two::Price {
            gross: 119,
            net: 100,
        })
    }))
    .await;
    assert_eq!(
        read,
        Ok(build_two::Price {
            gross: 119,
            net: 100
        }),
        "loaded by the new build, not misread from the old one's bytes"
    );
    let stats = new.backend_stats().unwrap();
    assert!(stats.decode_failures >= 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_killed_every_caller_is_answered_once_per_key_per_replica_then_sharing_resumes()
{
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let replicas = [
        hurried(Backend::redis(redis.url())),
        hurried(Backend::redis(redis.url())),
    ];
    // A value loaded while Redis is unreachable is served from memory for the stale
    // window (no invalidation can reach it meanwhile): one here.
    let policy = Policy::builder("outage")
        .fresh(Duration::from_secs(60))
        .stale(Duration::from_secs(60))
        .build()
        .unwrap();
    let caches = replicas
        .each_ref()
        .map(|runtime| Cache::builder(policy.clone()).runtime(runtime).build());
    let origin = Counted::default();
    assert_eq!(origin.load(&caches[0], 0, "warm").await, Ok("warm".into()));
    redis.kill();
    for cache in &caches {
        let callers: Vec<_> = (0..20)
            .map(|_| {
                let (cache, origin) = (cache.clone(), origin.clone());
                tokio::spawn(async move { origin.load(&cache, 1, "down").await })
            })
            .collect();
        for caller in callers {
            assert_eq!(bounded(caller).await.unwrap(), Ok("down".into()));
        }
        // Degraded: memory and in-process coalescing; the next call is a hit.
        assert_eq!(origin.load(cache, 1, "again").await, Ok("down".into()));
    }
    assert_eq!(origin.calls(), 1 + 2, "one per key per replica");
    redis.restart();
    // Within seconds the breaker closes and replicas share values again.
    let deadline = Instant::now() + DEADLINE;
    let mut key = 100;
    loop {
        key += 1;
        let before = origin.calls();
        origin.load(&caches[0], key, "shared").await.unwrap();
        origin.load(&caches[1], key, "shared").await.unwrap();
        if origin.calls() == before + 1 {
            break;
        }
        assert!(Instant::now() < deadline, "replicas never shared again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_black_holed_callers_are_answered_within_the_response_timeout() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = hurried(Backend::redis(redis.url()));
    let cache = cache(&runtime, "black-hole");
    let origin = Counted::default();
    assert_eq!(origin.load(&cache, 1, "one").await, Ok("one".into()));
    redis.black_hole();
    for key in 2..8 {
        // The response timeout (250 ms) plus the origin, with room for a busy machine.
        let answer =
            tokio::time::timeout(Duration::from_secs(2), origin.load(&cache, key, "local")).await;
        assert_eq!(answer.expect("answered in time"), Ok("local".into()));
    }
    assert_eq!(origin.calls(), 7);
    assert!(cache.stats().backend_errors >= 6);
    redis.heal();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_the_store_cannot_take_is_queued_and_replayed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        hurried(Backend::redis(redis.url())),
        hurried(Backend::redis(redis.url())),
    );
    let (first, second) = (cache(&one, "queued"), cache(&other, "queued"));
    let origin = Counted::default();
    assert_eq!(origin.load(&first, 9, "old").await, Ok("old".into()));
    redis.black_hole();
    let refused = bounded(first.invalidate(&9)).await.unwrap_err();
    assert!(
        matches!(&refused, Error::Backend { message, .. } if message.contains("queued")),
        "{refused}"
    );
    assert_eq!(one.backend_stats().unwrap().invalidations_queued, 1);
    redis.heal();
    // Replayed in the background, without another call on this replica.
    eventually(|| one.backend_stats().unwrap().invalidations_queued == 0).await;
    assert_eq!(origin.load(&second, 9, "new").await, Ok("new".into()));
    assert_eq!(
        origin.calls(),
        2,
        "the old value was gone for every replica"
    );
}

// A `#[cached]` function that knows nothing of Redis: only the environment moves it there.
static ORIGIN_CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Profile {
    id: u64,
    name: String,
}

#[cached(fresh = "60s")]
async fn user_profile(id: u64) -> Result<Profile, AppError> {
    ORIGIN_CALLS.fetch_add(1, Ordering::SeqCst);
    Ok(Profile {
        id,
        name: format!("user {id}"),
    })
}

#[tokio::test]
#[ignore = "run by its parent in a process of its own"]
async fn child_calls_a_cached_function() {
    let profile = user_profile(42).await.unwrap();
    println!("{REPORT}name={}", profile.name);
    println!(
        "{REPORT}origin_calls={}",
        ORIGIN_CALLS.load(Ordering::SeqCst)
    );
}

#[test]
fn a_config_file_alone_moves_an_unchanged_cached_function_to_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let file = ConfigFile::new(
        "shared-store",
        &format!("[backend]\nkind = \"redis\"\nurl = \"{}\"\n", redis.url()),
    );
    let env = [("STAMPEDE_CONFIG", file.0.clone().into_os_string())];
    assert_eq!(
        run_child(module_path!(), "child_calls_a_cached_function", &env),
        ["name=user 42", "origin_calls=1"]
    );
    let key = value_key(&redis, "user_profile");
    assert!(key.contains(":v0:42}"), "{key}");
    assert_eq!(
        run_child(module_path!(), "child_calls_a_cached_function", &env),
        ["name=user 42", "origin_calls=0"],
        "a second process is served the first one's value"
    );
}
