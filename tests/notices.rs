//! Which notices a replica hears: those of the keys it loads or keeps a memory copy of
//! (and of keys that share a notice bucket with them), not every key's. Against a real
//! `redis-server` each test starts for itself (skipped, loudly, without one;
//! `STAMPEDE_REQUIRE_REDIS=1` makes that a failure).
use crate::common;

use common::{bounded, eventually, patient_replica, run_child, AppError, REPORT};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::Arc;
use std::time::Duration;
use testkit::RedisServer;

fn cache(runtime: &Runtime, name: &str) -> Cache<u64, String, AppError> {
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy).runtime(runtime).build()
}

async fn load(cache: &Cache<u64, String, AppError>, key: u64, value: &str) -> String {
    let value = value.to_owned();
    bounded(cache.load(key, move || async move { Ok(value) }))
        .await
        .unwrap()
}

fn received(runtime: &Runtime) -> u64 {
    runtime.backend_stats().unwrap().notices_received
}

/// Loads keys until one is kept in memory: the subscription is up (a copy made before
/// would be dropped when it comes up).
async fn subscribed(runtime: &Runtime, cache: &Cache<u64, String, AppError>, key: u64) {
    load(cache, key, "probe").await;
    eventually(|| {
        runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed)
    })
    .await;
    bounded(async {
        while cache.peek(&key).is_none() {
            cache.invalidate(&key).await.unwrap();
            load(cache, key, "probe").await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_hears_the_keys_it_holds_and_not_every_key() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (quiet, busy) = (
        patient_replica(Backend::tiered(redis.url())),
        patient_replica(Backend::tiered(redis.url())),
    );
    let (held, written) = (cache(&quiet, "notices"), cache(&busy, "notices"));
    subscribed(&quiet, &held, 1).await;
    subscribed(&busy, &written, 2).await;
    let before = received(&quiet);
    // 200 writes of keys the quiet replica never loaded, then an invalidation of the one
    // key it holds. Redis sends a subscriber its messages in the order it published
    // them, so once the invalidation arrived every earlier notice that was to reach it
    // did.
    for key in 1_000..1_200 {
        load(&written, key, "v").await;
    }
    bounded(written.invalidate(&1)).await.unwrap();
    eventually(|| held.peek(&1).is_none()).await;
    let heard = received(&quiet) - before;
    // One bucket of 4,096 is the quiet replica's: of the 200 keys, the few that share it.
    assert!(
        heard < 10,
        "the quiet replica heard {heard} notices; every replica used to hear all 201"
    );
    let buckets = quiet.backend_stats().unwrap().notice_buckets;
    assert_eq!(buckets, 1, "key 1's");
    // The writer hears its own 200 publishes: it loaded those keys.
    eventually(|| received(&busy) >= 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_subscription_drops_a_new_copy_hears_its_key_again() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        patient_replica(Backend::tiered(redis.url())),
        patient_replica(Backend::tiered(redis.url())),
    );
    let (held, writer) = (cache(&one, "renewed"), cache(&other, "renewed"));
    subscribed(&one, &held, 5).await;
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    eventually(|| !one.backend_stats().unwrap().subscribed || held.peek(&5).is_none()).await;
    // Back under a new subscription: the copy the next load makes relies on the key's
    // bucket being subscribed again, which that load confirms before its first read.
    subscribed(&one, &held, 5).await;
    assert!(held.peek(&5).is_some(), "kept in memory");
    bounded(writer.invalidate(&5)).await.unwrap();
    eventually(|| held.peek(&5).is_none()).await;
    assert_eq!(load(&held, 5, "after").await, "after");
}

/// The reads a replica sent to Redis (found or not).
fn reads(runtime: &Runtime) -> u64 {
    let stats = runtime.backend_stats().unwrap();
    stats.hits + stats.misses
}

/// Five times, on five keys: one replica loads `value` while another waits for it. The
/// reads the waiter sent from once it was parked, just before the load ended, to its
/// answer, each time. A waiter also reads again by itself while it waits (each few
/// hundred milliseconds, to see the holder is alive), so one of those may fall in the
/// window too.
async fn reads_after_the_wake(value: String) -> Option<Vec<u64>> {
    let redis = RedisServer::start()?;
    let (loading, waiting) = (
        patient_replica(Backend::redis(redis.url())),
        patient_replica(Backend::redis(redis.url())),
    );
    let (loader, waiter) = (cache(&loading, "carried"), cache(&waiting, "carried"));
    subscribed_redis(&loading, &loader).await;
    subscribed_redis(&waiting, &waiter).await;
    let mut counts = Vec::new();
    for key in 0..5 {
        let (entered, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let load = tokio::spawn({
            let (loader, entered, release, value) = (
                loader.clone(),
                entered.clone(),
                release.clone(),
                value.clone(),
            );
            async move {
                loader
                    .load(key, move || async move {
                        entered.notify_one();
                        release.notified().await;
                        Ok::<_, AppError>(value)
                    })
                    .await
            }
        });
        bounded(entered.notified()).await;
        let (waits, reads_before) = (waiter.stats().lease_waits, reads(&waiting));
        let wait = tokio::spawn({
            let waiter = waiter.clone();
            async move {
                waiter
                    .load(key, || async { Ok("not mine".to_owned()) })
                    .await
            }
        });
        // Parked: its read found the lease held (counted as a wait), then it registered
        // for the notice and read once more before waiting. Counted from before that
        // second read, a busy machine made it look like a read after the wake.
        eventually(|| {
            waiter.stats().lease_waits == waits + 1 && reads(&waiting) >= reads_before + 2
        })
        .await;
        let before = reads(&waiting);
        release.notify_one();
        assert_eq!(bounded(load).await.unwrap(), Ok(value.clone()));
        assert_eq!(bounded(wait).await.unwrap(), Ok(value.clone()));
        counts.push(reads(&waiting) - before);
    }
    Some(counts)
}

/// Until a redis-backend replica's subscription is up (its first load connects it).
async fn subscribed_redis(runtime: &Runtime, cache: &Cache<u64, String, AppError>) {
    bounded(async {
        loop {
            load(cache, u64::MAX, "probe").await;
            if runtime
                .backend_stats()
                .is_some_and(|stats| stats.subscribed)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// In a process of its own: the background threads are the process's, and other tests'
/// replicas keeping it busy would delay the notice past the waiter's own re-read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by its parent in a process of its own"]
async fn child_counts_the_reads_after_each_wake() {
    // Run alone (`--include-ignored`), it has nothing to do.
    let Ok(bytes) = std::env::var("NOTICE_TEST_VALUE_BYTES") else {
        return;
    };
    let bytes: usize = bytes.parse().unwrap();
    let reads = reads_after_the_wake("x".repeat(bytes))
        .await
        .expect("a redis-server");
    println!("{REPORT}{reads:?}");
}

/// The reads after each of five wakes, with a value of `bytes`, or `None` without Redis.
fn reads_in_a_process_of_its_own(bytes: usize) -> Option<Vec<u64>> {
    drop(RedisServer::start()?);
    let env = [("NOTICE_TEST_VALUE_BYTES", bytes.to_string().into())];
    let report = run_child(
        module_path!(),
        "child_counts_the_reads_after_each_wake",
        &env,
    );
    let line = report.first().expect("the child's report");
    let counts = line.trim_matches(|c| c == '[' || c == ']').split(", ");
    Some(counts.map(|n| n.parse().unwrap()).collect())
}

#[test]
fn a_waiter_on_another_replica_is_answered_by_the_publish_notice_itself() {
    let Some(reads) = reads_in_a_process_of_its_own(5) else {
        return;
    };
    // Were every wake followed by a read, no round would be without one.
    assert!(
        reads.contains(&0),
        "the value came with the notice, yet each wake read: {reads:?}"
    );
}

#[test]
fn a_value_too_large_to_ride_along_is_read_after_the_notice() {
    let Some(reads) = reads_in_a_process_of_its_own(4096) else {
        return;
    };
    assert!(
        reads.iter().all(|&n| n >= 1),
        "a read after every wake: {reads:?}"
    );
}
