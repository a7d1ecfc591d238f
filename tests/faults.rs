//! The fleet under faults: Redis slow, paused, out of memory, restarted, flushed or
//! unreachable, replies lost, clients starved, and the races a healthy fleet meets too.
//! Each test starts its own `redis-server` (skipped, loudly, without one;
//! `STAMPEDE_REQUIRE_REDIS=1` makes that a failure) and says which promise it holds: no
//! caller answered with a value an invalidation retired, no caller waiting on a lease
//! nobody will publish, no stale window turned into misses.
use crate::common;

use common::{bounded, eventually, AppError, ConfigFile, DEADLINE};
use serde::{Deserialize, Serialize};
use stampede::{Backend, Cache, Policy, Runtime};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::RedisServer;
use tokio::sync::Notify;

/// A replica of `backend` with `settings` (lines of the `[backend]` table) on top.
fn replica_with(backend: Backend, settings: &str) -> Runtime {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let file = ConfigFile::new(&format!("faults-{n}"), &format!("[backend]\n{settings}\n"));
    Runtime::builder()
        .file(&file.0)
        .expect("the settings parse")
        .backend(backend)
        .build()
        .expect("a shared backend with its url")
}

fn replica(backend: Backend) -> Runtime {
    Runtime::builder().backend(backend).build().unwrap()
}

fn policy(name: &str, fresh: Duration) -> stampede::PolicyBuilder {
    Policy::builder(name).fresh(fresh)
}

fn cache<V>(runtime: &Runtime, policy: stampede::PolicyBuilder) -> Cache<u64, V, AppError>
where
    V: Clone + Send + Sync + Serialize + for<'de> Deserialize<'de> + 'static,
{
    Cache::builder(policy.build().unwrap())
        .runtime(runtime)
        .build()
}

/// The source of truth: a version the test moves, which every origin call reads.
#[derive(Clone, Default)]
struct Source {
    version: Arc<AtomicU64>,
    calls: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    max_running: Arc<AtomicUsize>,
}

impl Source {
    fn set(&self, version: u64) {
        self.version.store(version, Ordering::SeqCst);
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }

    /// Loads `key` through an origin that reads the version when it starts, takes
    /// `latency` and answers what it read.
    async fn load(
        &self,
        cache: &Cache<u64, u64, AppError>,
        key: u64,
        latency: Duration,
    ) -> Result<u64, AppError> {
        let source = self.clone();
        cache
            .load(key, move || async move {
                let _running = source.enter();
                let read = source.version.load(Ordering::SeqCst);
                tokio::time::sleep(latency).await;
                Ok(read)
            })
            .await
    }

    /// Loads `key` through an origin that reads the version, says it started, and answers
    /// once `release` is notified: a load the test holds open.
    fn held_load(
        &self,
        cache: &Cache<u64, u64, AppError>,
        key: u64,
    ) -> (HeldLoad, tokio::task::JoinHandle<Result<u64, AppError>>) {
        let held = HeldLoad::default();
        let (source, cache, started, release) = (
            self.clone(),
            cache.clone(),
            held.started.clone(),
            held.release.clone(),
        );
        let task = tokio::spawn(async move {
            cache
                .load(key, move || async move {
                    let _running = source.enter();
                    let read = source.version.load(Ordering::SeqCst);
                    started.notify_one();
                    release.notified().await;
                    Ok(read)
                })
                .await
        });
        (held, task)
    }

    fn enter(&self) -> Running {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        Running(self.running.clone())
    }
}

struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct HeldLoad {
    started: Arc<Notify>,
    release: Arc<Notify>,
}

impl HeldLoad {
    async fn started(&self) {
        bounded(self.started.notified()).await;
    }

    fn release(&self) {
        self.release.notify_one();
    }
}

/// Keys stored under the default prefix whose name contains `part`.
fn stored_keys(redis: &RedisServer, part: &str) -> Vec<String> {
    let out = redis.cli(&["--scan", "--pattern", "stampede*"]);
    out.lines()
        .filter(|key| key.contains(part))
        .map(str::to_owned)
        .collect()
}

fn value_key(redis: &RedisServer, name: &str) -> String {
    stored_keys(redis, name)
        .into_iter()
        .find(|key| key.ends_with('}'))
        .unwrap_or_else(|| panic!("no value key naming {name}"))
}

/// Waits until `runtime` has received `more` notices beyond `before`.
async fn notices_beyond(runtime: &Runtime, before: u64, more: u64) {
    eventually(|| {
        runtime
            .backend_stats()
            .is_some_and(|stats| stats.notices_received >= before + more)
    })
    .await;
}

fn received(runtime: &Runtime) -> u64 {
    runtime
        .backend_stats()
        .map_or(0, |stats| stats.notices_received)
}

/// Waits until `runtime`'s subscription is up (it connects lazily, on first use).
/// The subscription is up and confirmed (the hearing lease holds): tiered copies serve.
async fn subscribed(runtime: &Runtime) {
    eventually(|| {
        runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed && stats.hearing_lease_holds)
    })
    .await;
}

/// A shared backend at a URL.
type BackendOf = fn(String) -> Backend;

/// How long after another replica's invalidation returned a new call may still be
/// answered by the older load: the notice's delivery, on loopback well under this.
const NOTICE_DELIVERY: Duration = Duration::from_millis(20);

// --- Retired values: no call that starts after an invalidation gets what it retired ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_another_replicas_invalidation_does_not_join_the_older_load() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let backends: [(BackendOf, &str); 2] = [
        (Backend::redis, "joined-redis"),
        (Backend::tiered, "joined-tiered"),
    ];
    for (backend, name) in backends {
        let (one, other) = (replica(backend(redis.url())), replica(backend(redis.url())));
        let fresh = Duration::from_secs(20);
        let (loading, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
            cache(&one, policy(name, fresh)),
            cache(&other, policy(name, fresh)),
        );
        let source = Source::default();
        source.set(1);
        // Both replicas connected and listening before the race.
        source.load(&writer, 99, Duration::ZERO).await.unwrap();
        source.load(&loading, 99, Duration::ZERO).await.unwrap();
        subscribed(&one).await;
        let (held, first) = source.held_load(&loading, 1);
        held.started().await;
        source.set(2);
        bounded(writer.invalidate(&1)).await.unwrap();
        tokio::time::sleep(NOTICE_DELIVERY).await;
        let later = bounded(source.load(&loading, 1, Duration::ZERO)).await;
        held.release();
        assert_eq!(bounded(first).await.unwrap(), Ok(1), "its own caller");
        assert_eq!(later, Ok(2), "a call after the invalidation, {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_notice_during_a_read_keeps_the_read_value_out_of_memory() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    );
    let fresh = Duration::from_secs(20);
    let (reader, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("notice-race", fresh)),
        cache(&other, policy("notice-race", fresh)),
    );
    let source = Source::default();
    source.load(&reader, 999, Duration::ZERO).await.unwrap();
    source.load(&writer, 999, Duration::ZERO).await.unwrap();
    subscribed(&one).await;
    subscribed(&other).await;
    const ROUNDS: u64 = 200;
    let mut kept_retired = Vec::new();
    for round in 1..=ROUNDS {
        let key = round;
        source.set(round);
        assert_eq!(source.load(&writer, key, Duration::ZERO).await, Ok(round));
        // The reader reads the key from Redis while the writer invalidates it.
        let read = tokio::spawn({
            let (reader, source) = (reader.clone(), source.clone());
            async move { source.load(&reader, key, Duration::ZERO).await }
        });
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_micros(round % 7 * 60) {
            std::hint::spin_loop();
        }
        source.set(round + 1);
        bounded(writer.invalidate(&key)).await.unwrap();
        bounded(read).await.unwrap().unwrap();
        // Whatever the reader's memory holds of the key once the notice has had a second
        // to arrive (on loopback it takes well under a millisecond) must not be retired.
        let heard_by = Instant::now() + Duration::from_secs(1);
        while reader.peek(&key).is_some_and(|held| held <= round) {
            if Instant::now() > heard_by {
                kept_retired.push(round);
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    assert!(
        kept_retired.is_empty(),
        "the reader kept a retired value in {} of {ROUNDS} rounds: {kept_retired:?}",
        kept_retired.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_replica_keeps_no_copy_while_it_cannot_hear_notices() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // A replica that cannot subscribe (as one is from start-up until it first subscribes,
    // and after its subscription drops, until it is back): it never hears notices.
    redis.cli(&[
        "ACL",
        "SETUSER",
        "deaf",
        "on",
        ">deaf",
        "~*",
        "&*",
        "+@all",
        "-subscribe",
        "-psubscribe",
        "-ssubscribe",
    ]);
    let deaf_url = redis.url().replacen("redis://", "redis://deaf:deaf@", 1);
    let (deaf, writing) = (
        replica(Backend::tiered(deaf_url)),
        replica(Backend::tiered(redis.url())),
    );
    let fresh = Duration::from_secs(20);
    let (reader, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&deaf, policy("deaf", fresh)),
        cache(&writing, policy("deaf", fresh)),
    );
    let source = Source::default();
    source.set(1);
    assert_eq!(source.load(&writer, 1, Duration::ZERO).await, Ok(1));
    assert_eq!(
        source.load(&reader, 1, Duration::ZERO).await,
        Ok(1),
        "read from Redis"
    );
    source.set(2);
    // Its notice never reaches the reader: nothing to wait for.
    bounded(writer.invalidate(&1)).await.unwrap();
    assert_eq!(
        source.load(&reader, 1, Duration::ZERO).await,
        Ok(2),
        "a copy kept while the reader could not hear the invalidation"
    );
    assert_eq!(source.calls(), 2, "the reader read Redis, not the origin");
    let stats = deaf.backend_stats().expect("connected");
    assert!(!stats.subscribed, "the reader never subscribed: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_tiered_memory_keeps_every_copy_it_holds_in_hearing_of_notices() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (reading, writing) = (
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (reader, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&reading, policy("full", fresh).capacity(50)),
        cache(&writing, policy("full", fresh)),
    );
    let source = Source::default();
    source.load(&reader, 9999, Duration::ZERO).await.unwrap();
    subscribed(&reading).await;
    // Far more keys than the reader's memory holds, some hot: memory keeps what it
    // chooses, and every copy it keeps must still hear the notice that retires it.
    source.set(1);
    const KEYS: u64 = 400;
    for round in 0..3u64 {
        for key in 0..KEYS {
            if round == 0 || key % 10 == 0 {
                bounded(source.load(&reader, key, Duration::ZERO))
                    .await
                    .unwrap();
            }
        }
    }
    source.set(2);
    for key in 0..KEYS {
        bounded(writer.invalidate(&key)).await.unwrap();
    }
    // Every notice has had a second to arrive (on loopback each takes well under a
    // millisecond); a copy that cannot hear one keeps its value for the whole `fresh`.
    let retired = || -> Vec<u64> {
        (0..KEYS)
            .filter(|key| reader.peek(key) == Some(1))
            .collect()
    };
    let heard_by = Instant::now() + Duration::from_secs(1);
    while !retired().is_empty() && Instant::now() < heard_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retired = retired();
    assert!(
        retired.is_empty(),
        "{} copies kept after their invalidation: {retired:?}",
        retired.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_publish_that_times_out_keeps_no_value_an_invalidation_retired() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let loading_replica = replica(Backend::tiered(redis.url()));
    let writing_replica = replica(Backend::tiered(redis.direct_url()));
    let fresh = Duration::from_secs(20);
    let (loading, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&loading_replica, policy("publish-timeout", fresh)),
        cache(&writing_replica, policy("publish-timeout", fresh)),
    );
    let source = Source::default();
    source.set(1);
    source.load(&loading, 99, Duration::ZERO).await.unwrap();
    subscribed(&loading_replica).await;
    let (held, first) = source.held_load(&loading, 1);
    held.started().await;
    source.set(2);
    let before = received(&loading_replica);
    bounded(writer.invalidate(&1)).await.unwrap();
    notices_beyond(&loading_replica, before, 1).await;
    // The load's publish goes out into a black hole and times out.
    redis.black_hole();
    held.release();
    assert_eq!(bounded(first).await.unwrap(), Ok(1), "its own caller");
    redis.heal();
    let after = bounded(source.load(&loading, 1, Duration::ZERO)).await;
    assert_eq!(after, Ok(2), "the retired value stayed in memory");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_loaded_while_degraded_is_dropped_by_the_invalidation_it_ran_into() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (loading_replica, writing_replica) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(20);
    let (loading, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(
            &loading_replica,
            policy("degraded-copy", fresh).stale(fresh),
        ),
        cache(
            &writing_replica,
            policy("degraded-copy", fresh).stale(fresh),
        ),
    );
    let source = Source::default();
    source.set(1);
    source.load(&loading, 99, Duration::ZERO).await.unwrap();
    source.load(&writer, 99, Duration::ZERO).await.unwrap();
    subscribed(&loading_replica).await;
    // Scripts wait out the pause; the subscription does not notice it.
    redis.cli(&["CLIENT", "PAUSE", "600", "WRITE"]);
    let paused = Instant::now();
    let (held, first) = source.held_load(&loading, 1);
    held.started().await;
    assert!(
        loading.stats().backend_errors >= 1,
        "its read timed out: a local load"
    );
    tokio::time::sleep(Duration::from_millis(700).saturating_sub(paused.elapsed())).await;
    source.set(2);
    let before = received(&loading_replica);
    bounded(writer.invalidate(&1)).await.unwrap();
    notices_beyond(&loading_replica, before, 1).await;
    held.release();
    assert_eq!(bounded(first).await.unwrap(), Ok(1), "its own caller");
    // Counted as received is not yet applied: the cache's listener drops the copy (or
    // detaches the load) a moment later, on the background threads. A copy that outlived
    // the notice would stay: that fails here, at the deadline.
    eventually(|| loading.peek(&1) != Some(1)).await;
    let after = bounded(source.load(&loading, 1, Duration::ZERO)).await;
    assert_eq!(after, Ok(2), "the degraded copy outlived the invalidation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_refresh_is_not_overwritten_by_a_load_that_started_before_it() {
    type Row = (String, u64);
    let forced = |cache: Cache<u64, Row, AppError>| async move {
        let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let older = tokio::spawn({
            let (cache, started, release) = (cache.clone(), started.clone(), release.clone());
            async move {
                cache
                    .load(1, move || async move {
                        started.notify_one();
                        release.notified().await;
                        Ok(("before the refresh".to_owned(), 1))
                    })
                    .await
            }
        });
        bounded(started.notified()).await;
        let refreshed = bounded(cache.refresh(1, || async { Ok(("refreshed".to_owned(), 2)) }))
            .await
            .unwrap();
        assert_eq!(refreshed.0, "refreshed");
        release.notify_one();
        assert_eq!(
            bounded(older).await.unwrap().unwrap().0,
            "before the refresh"
        );
    };
    let fresh = Duration::from_secs(60);
    // In memory, with and without source versions.
    for versioned in [false, true] {
        let name = format!("forced-memory-{versioned}");
        let builder = Cache::builder(policy(&name, fresh).build().unwrap())
            .runtime(&Runtime::builder().build().unwrap());
        let cache: Cache<u64, Row, AppError> = match versioned {
            true => builder.source_version(|row: &Row| row.1).build(),
            false => builder.build(),
        };
        forced(cache.clone()).await;
        assert_eq!(
            cache.peek(&1).map(|row| row.0),
            Some("refreshed".to_owned()),
            "memory, versioned: {versioned}"
        );
    }
    // In Redis, without source versions: the older load holds the lease.
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let loading: Cache<u64, Row, AppError> = cache(&one, policy("forced-redis", fresh));
    let reading: Cache<u64, Row, AppError> = cache(&other, policy("forced-redis", fresh));
    forced(loading).await;
    let stored = bounded(reading.load(1, || async { Ok(("loaded again".to_owned(), 3)) })).await;
    assert_eq!(stored.unwrap().0, "refreshed", "redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_read_before_redis_restarted_from_a_snapshot_is_not_stored() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (loading, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("snapshot", fresh)),
        cache(&other, policy("snapshot", fresh)),
    );
    let source = Source::default();
    source.set(1);
    source.load(&loading, 99, Duration::ZERO).await.unwrap();
    subscribed(&one).await;
    let (held, first) = source.held_load(&loading, 1);
    held.started().await;
    // A snapshot with the load's lease and fence in it, then an invalidation that the
    // snapshot does not have, then a crash and a restart from the snapshot.
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    source.set(2);
    bounded(writer.invalidate(&1)).await.unwrap();
    redis.kill();
    redis.restart();
    eventually(|| {
        one.backend_stats()
            .is_some_and(|stats| stats.subscribed && !stats.degraded_now)
    })
    .await;
    held.release();
    assert_eq!(bounded(first).await.unwrap(), Ok(1), "its own caller");
    let after = bounded(source.load(&writer, 1, Duration::ZERO)).await;
    assert_eq!(after, Ok(2), "the load from before the restart was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_serde_tells_apart_are_different_entries() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
    #[serde(untagged)]
    enum Width {
        Small(u8),
        Big(u64),
    }
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
    #[serde(untagged)]
    enum Text {
        Letter(char),
        Word(String),
    }
    let runtime = replica(Backend::redis(redis.url()));
    let fresh = Duration::from_secs(60);
    let widths: Cache<Width, String, AppError> =
        Cache::builder(policy("untagged-width", fresh).build().unwrap())
            .runtime(&runtime)
            .build();
    let texts: Cache<Text, String, AppError> =
        Cache::builder(policy("untagged-text", fresh).build().unwrap())
            .runtime(&runtime)
            .build();
    let small = bounded(widths.load(Width::Small(1), || async { Ok("small".to_owned()) })).await;
    let big = bounded(widths.load(Width::Big(1), || async { Ok("big".to_owned()) })).await;
    assert_eq!(
        (small.unwrap(), big.unwrap()),
        ("small".into(), "big".into())
    );
    let letter = bounded(texts.load(Text::Letter('a'), || async { Ok("char".to_owned()) })).await;
    let word = bounded(texts.load(Text::Word("a".into()), || async { Ok("str".to_owned()) })).await;
    assert_eq!(
        (letter.unwrap(), word.unwrap()),
        ("char".into(), "str".into())
    );
}

// --- The store's own faults: a reply lost, memory full, a restart, a flush ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_grant_reply_is_lost_is_taken_over_and_then_released() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let lost = replica(Backend::redis(redis.url()));
    let waiting = replica(Backend::redis(redis.direct_url()));
    let fresh = Duration::from_millis(300);
    let (first, second): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&lost, policy("lost-grant", fresh)),
        cache(&waiting, policy("lost-grant", fresh)),
    );
    let source = Source::default();
    let latency = Duration::from_millis(50);
    // A known recompute time (δ) in the stored envelope.
    source.load(&first, 1, latency).await.unwrap();
    source.load(&second, 1, latency).await.unwrap();
    // Expired, and past the second in which a read may skip the script (a plain MGET of a
    // fresh value): the next read runs the script, which takes the lease.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The first replica's read takes the lease, and its reply never arrives.
    redis.hold_replies();
    let lost_read = tokio::spawn({
        let (first, source) = (first.clone(), source.clone());
        async move { source.load(&first, 1, latency).await }
    });
    eventually(|| {
        stored_keys(&redis, "lost-grant")
            .iter()
            .any(|k| k.ends_with(":lease"))
    })
    .await;
    let started = Instant::now();
    assert_eq!(bounded(source.load(&second, 1, latency)).await, Ok(0));
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "waited {waited:?} on a lease nobody will publish (default lease 5 s)"
    );
    assert_eq!(bounded(lost_read).await.unwrap(), Ok(0), "loaded locally");
    assert_eq!(second.stats().lease_takeovers, 1, "{:?}", second.stats());
    redis.heal();

    // A lost grant with nobody taking it over is released by its token, not left to lapse
    // with its TTL: by the release sent when the read went unanswered (Redis runs it; its
    // reply is held too) or by the replay of that release once Redis answers again.
    redis.hold_replies();
    let cold = tokio::spawn({
        let (first, source) = (first.clone(), source.clone());
        async move { source.load(&first, 2, latency).await }
    });
    eventually(|| {
        stored_keys(&redis, "lost-grant")
            .iter()
            .any(|k| k.ends_with(":lease"))
    })
    .await;
    assert_eq!(bounded(cold).await.unwrap(), Ok(0));
    redis.heal();
    let healed = Instant::now();
    eventually(|| {
        !stored_keys(&redis, "lost-grant")
            .iter()
            .any(|k| k.ends_with(":lease"))
    })
    .await;
    assert!(
        healed.elapsed() < Duration::from_secs(2),
        "the orphaned lease lapsed with its TTL instead of being released"
    );
    // `orphaned_leases_released` counts only releases Redis confirmed: one whose reply was
    // held took effect unheard, and its replay finds no lease, so the count is not asserted.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_longer_than_the_waiters_own_lease_is_not_waited_out() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (patient, hurried) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let holder: Cache<u64, u64, _> = cache(
        &patient,
        policy("long-lease", fresh).lease(Duration::from_secs(3600)),
    );
    let waiter: Cache<u64, u64, _> = cache(
        &hurried,
        policy("long-lease", fresh).lease(Duration::from_secs(1)),
    );
    let source = Source::default();
    let (held, stalled) = source.held_load(&holder, 1);
    held.started().await;
    let started = Instant::now();
    assert_eq!(
        bounded(source.load(&waiter, 1, Duration::ZERO)).await,
        Ok(0)
    );
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "a 1 s lease waited {waited:?} on another replica's hour-long lease"
    );
    stalled.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wake_when_a_flush_refuses_the_owners_publish() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (owner, waiting): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("flushed", fresh)),
        cache(&other, policy("flushed", fresh)),
    );
    let source = Source::default();
    source.load(&waiting, 99, Duration::ZERO).await.unwrap();
    subscribed(&other).await;
    let (held, owned) = source.held_load(&owner, 1);
    held.started().await;
    let waiter = tokio::spawn({
        let (waiting, source) = (waiting.clone(), source.clone());
        async move { source.load(&waiting, 1, Duration::ZERO).await }
    });
    eventually(|| waiting.stats().lease_waits >= 1).await;
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let flushed = Instant::now();
    held.release();
    assert_eq!(bounded(owned).await.unwrap(), Ok(0));
    assert_eq!(bounded(waiter).await.unwrap(), Ok(0));
    let waited = flushed.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "the waiter sat out the 5 s lease after the refused publish: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_with_redis_out_of_memory_still_drops_the_value() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (reading, writer): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("oom", fresh)),
        cache(&other, policy("oom", fresh)),
    );
    let source = Source::default();
    source.set(1);
    assert_eq!(source.load(&reading, 1, Duration::ZERO).await, Ok(1));
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    source.set(2);
    // The fence cannot be raised with memory full: the call says so, but the value goes.
    let _ = bounded(writer.invalidate(&1)).await;
    assert_eq!(
        bounded(source.load(&reading, 1, Duration::ZERO)).await,
        Ok(2),
        "the retired value was served"
    );
    for replica in [&one, &other] {
        let stats = replica.backend_stats().unwrap();
        assert_eq!(
            stats.breaker_opened, 0,
            "out of memory is an answer, not an outage: {stats:?}"
        );
    }
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_whose_fence_is_past_two_to_the_53_is_replaced() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    // Stale for long after its freshness: the envelope stays in Redis, to be refreshed.
    let (fresh, stale) = (Duration::from_millis(200), Duration::from_secs(30));
    let (first, second): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("big-fence", fresh).stale(stale)),
        cache(&other, policy("big-fence", fresh).stale(stale)),
    );
    let source = Source::default();
    source.set(1);
    source.load(&first, 1, Duration::ZERO).await.unwrap();
    let key = value_key(&redis, "big-fence");
    // The header's fence (bytes 45..53) set to 2^53 + 1, which a double cannot hold.
    let patch = "local v = redis.call('GET', KEYS[1]) \
        redis.call('SET', KEYS[1], string.sub(v, 1, 45) .. '\\0\\32\\0\\0\\0\\0\\0\\1' .. string.sub(v, 54), 'KEEPTTL') \
        return 1";
    assert_eq!(redis.cli(&["EVAL", patch, "1", &key]), "1");
    tokio::time::sleep(fresh).await;
    source.set(2);
    // Served stale while one refresh replaces it: within moments, not at the end of the
    // stale window.
    let deadline = Instant::now() + Duration::from_secs(3);
    for cache in [&first, &second] {
        while bounded(source.load(cache, 1, Duration::ZERO))
            .await
            .unwrap()
            != 2
        {
            assert!(
                Instant::now() < deadline,
                "the key is wedged: {:?}",
                cache.stats()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_or_far_future_envelope_is_not_served() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let fresh = Duration::from_secs(30);
    let cache: Cache<u64, u64, _> = cache(&runtime, policy("untimed", fresh));
    let source = Source::default();
    source.set(1);
    assert_eq!(source.load(&cache, 1, Duration::ZERO).await, Ok(1));
    let key = value_key(&redis, "untimed");
    assert_eq!(redis.cli(&["PERSIST", &key]), "1");
    source.set(2);
    assert_eq!(
        source.load(&cache, 1, Duration::ZERO).await,
        Ok(2),
        "a value without a TTL is not ours"
    );
    // Deadlines of 2^64 - 1 ms (bytes 5..29) with a normal TTL.
    let patch = "local v = redis.call('GET', KEYS[1]) \
        redis.call('SET', KEYS[1], string.sub(v, 1, 5) .. string.rep('\\255', 24) .. string.sub(v, 30), 'KEEPTTL') \
        return 1";
    assert_eq!(redis.cli(&["EVAL", patch, "1", &key]), "1");
    source.set(3);
    assert_eq!(
        source.load(&cache, 1, Duration::ZERO).await,
        Ok(3),
        "a value fresh for ever"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_value_does_not_line_the_replicas_up_behind_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..4)
        .map(|_| replica_with(Backend::redis(redis.url()), "max_value_bytes = 1024"))
        .collect();
    let fresh = Duration::from_secs(60);
    let caches: Vec<Cache<u64, String, AppError>> = replicas
        .iter()
        .map(|runtime| cache(runtime, policy("oversized", fresh)))
        .collect();
    let source = Source::default();
    let start = Arc::new(tokio::sync::Barrier::new(caches.len()));
    let callers: Vec<_> = caches
        .iter()
        .map(|cache| {
            let (cache, source, start) = (cache.clone(), source.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                cache
                    .load(1, move || async move {
                        let _running = source.enter();
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Ok("x".repeat(10_000))
                    })
                    .await
            })
        })
        .collect();
    for caller in callers {
        assert_eq!(bounded(caller).await.unwrap().unwrap().len(), 10_000);
    }
    assert!(source.calls() <= 4, "{} calls", source.calls());
    assert!(
        source.max_running() >= source.calls() - 1,
        "the replicas loaded one after another ({} calls, at most {} at once)",
        source.calls(),
        source.max_running()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_cancelled_by_its_caller_does_not_wedge_the_breaker() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica_with(
        Backend::redis(redis.url()),
        "breaker_failures = 1\nbreaker_cooldown = \"100ms\"\nresponse_timeout = \"150ms\"",
    );
    let cache: Cache<u64, u64, _> = cache(&runtime, policy("probe", Duration::from_secs(60)));
    let source = Source::default();
    source.load(&cache, 1, Duration::ZERO).await.unwrap();
    redis.black_hole();
    // Callers that give up long before the response timeout; after each cooldown one of
    // them carries the breaker's probe.
    let until = Instant::now() + Duration::from_millis(1500);
    let mut key = 100;
    while Instant::now() < until {
        key += 1;
        let give_up = Duration::from_millis(20);
        let _ = tokio::time::timeout(give_up, cache.invalidate(&key)).await;
        let inline = cache.load_inline(key, || async { Ok(0) });
        let _ = tokio::time::timeout(give_up, inline).await;
    }
    redis.heal();
    let healed = Instant::now();
    let deadline = healed + Duration::from_secs(5);
    while runtime.backend_stats().unwrap().degraded_now {
        assert!(
            Instant::now() < deadline,
            "still degraded 5 s after Redis healed: {:?}",
            runtime.backend_stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_while_redis_is_unreachable_is_queued_and_replayed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (first, second): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("sweep-queued", fresh)),
        cache(&other, policy("sweep-queued", fresh)),
    );
    let source = Source::default();
    source.set(1);
    for key in 0..10 {
        source.load(&first, key, Duration::ZERO).await.unwrap();
    }
    redis.black_hole();
    assert!(bounded(first.invalidate_all()).await.is_err());
    source.set(2);
    redis.heal();
    eventually(|| one.backend_stats().unwrap().invalidations_queued == 0).await;
    for key in 0..10 {
        assert_eq!(source.load(&second, key, Duration::ZERO).await, Ok(2));
        assert_eq!(source.load(&first, key, Duration::ZERO).await, Ok(2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_invalidations_queue_and_replay_within_the_deadline() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::redis(redis.url())),
        replica(Backend::redis(redis.url())),
    );
    let fresh = Duration::from_secs(60);
    let (first, second): (Cache<u64, u64, _>, Cache<u64, u64, _>) = (
        cache(&one, policy("queued-many", fresh)),
        cache(&other, policy("queued-many", fresh)),
    );
    let source = Source::default();
    source.set(1);
    source.load(&first, 7, Duration::ZERO).await.unwrap();
    redis.kill();
    const QUEUED: u64 = 20_000;
    bounded(async {
        for key in 0..QUEUED {
            assert!(first.invalidate(&key).await.is_err());
        }
    })
    .await;
    assert_eq!(one.backend_stats().unwrap().invalidations_queued, QUEUED);
    redis.restart();
    // 20,000 scripts sent by a debug build: the whole test takes about 8 s alone on two
    // cores, more beside the other tests. The bound is sized for the queue, not a speed.
    common::eventually_within(DEADLINE * 6, || {
        one.backend_stats().unwrap().invalidations_queued == 0
    })
    .await;
    source.set(2);
    // The restart emptied Redis; a value stored since is what the replay must not remove.
    assert_eq!(source.load(&second, 7, Duration::ZERO).await, Ok(2));
    assert_eq!(source.load(&first, 7, Duration::ZERO).await, Ok(2));
}

#[test]
fn a_runtime_that_outlives_its_first_tokio_runtime_still_hears_other_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let outliving = replica(Backend::tiered(redis.url()));
    let fresh = Duration::from_secs(60);
    let cache_of = |runtime: &Runtime| -> Cache<u64, u64, AppError> {
        cache(runtime, policy("outlived", fresh))
    };
    let outlived = cache_of(&outliving);
    let source = Source::default();
    source.set(1);
    let first = tokio::runtime::Runtime::new().unwrap();
    first.block_on(async {
        source.load(&outlived, 1, Duration::ZERO).await.unwrap();
        subscribed(&outliving).await;
    });
    drop(first);
    let second = tokio::runtime::Runtime::new().unwrap();
    second.block_on(async {
        assert_eq!(source.load(&outlived, 1, Duration::ZERO).await, Ok(1));
        let writer_replica = replica(Backend::tiered(redis.url()));
        let writer = cache_of(&writer_replica);
        source.set(2);
        bounded(writer.invalidate(&1)).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        while outlived.peek(&1).is_some() {
            assert!(
                Instant::now() < deadline,
                "the memory copy never heard the invalidation"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(source.load(&outlived, 1, Duration::ZERO).await, Ok(2));
    });
}

// --- Stalls: no caller waits on a lease nobody will publish ---

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_elsewhere_never_turns_the_stale_window_into_misses() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..3)
        .map(|_| replica(Backend::tiered(redis.url())))
        .collect();
    let (fresh, stale) = (Duration::from_millis(300), Duration::from_millis(1500));
    let policy = || {
        policy("stale-held", fresh)
            .stale(stale)
            .lease(Duration::from_secs(10))
    };
    let caches: Vec<Cache<u64, u64, AppError>> = replicas
        .iter()
        .map(|runtime| cache(runtime, policy()))
        .collect();
    let source = Source::default();
    source.set(1);
    for cache in &caches {
        source
            .load(cache, 1, Duration::from_millis(20))
            .await
            .unwrap();
    }
    tokio::time::sleep(fresh + Duration::from_millis(20)).await;
    // The first replica takes the refresh lease and its refresh never ends.
    let (held, _stalled) = source.held_load(&caches[0], 1);
    held.started().await;
    source.set(2);
    // A miss of memory is no miss of the fleet when Redis has a value to serve: count the
    // misses whose read of Redis found nothing servable (so they waited for the origin).
    let misses_before: u64 = caches.iter().map(|c| c.stats().shared_misses).sum();
    let until = Instant::now() + stale + Duration::from_millis(500);
    let mut slowest = Duration::ZERO;
    let mut last = 0;
    while Instant::now() < until {
        for cache in &caches[1..] {
            let asked = Instant::now();
            last = bounded(source.load(cache, 1, Duration::from_millis(20)))
                .await
                .unwrap();
            slowest = slowest.max(asked.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let misses: u64 = caches.iter().map(|c| c.stats().shared_misses).sum::<u64>() - misses_before;
    assert_eq!(last, 2, "another replica took the refresh over");
    assert_eq!(misses, 0, "callers were turned into misses");
    assert!(
        slowest < Duration::from_millis(200),
        "a caller waited {slowest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_times_out_leaves_the_next_expiry_at_one_origin_call() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let lost = replica(Backend::redis(redis.url()));
    let others: Vec<Runtime> = (0..2)
        .map(|_| replica(Backend::redis(redis.direct_url())))
        .collect();
    let fresh = Duration::from_millis(400);
    let loading: Cache<u64, u64, AppError> = cache(&lost, policy("lost-publish", fresh));
    let caches: Vec<Cache<u64, u64, AppError>> = others
        .iter()
        .map(|runtime| cache(runtime, policy("lost-publish", fresh)))
        .collect();
    let source = Source::default();
    let (held, first) = source.held_load(&loading, 1);
    held.started().await;
    // The publish never reaches Redis, and neither does the release that follows it.
    redis.black_hole();
    held.release();
    assert_eq!(bounded(first).await.unwrap(), Ok(0));
    // Past the publish's response timeout and the release's after it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    redis.proxy().drop_connections();
    redis.heal();
    let calls = source.calls();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    for cache in &caches {
        let asked = Instant::now();
        bounded(source.load(cache, 1, Duration::from_millis(50)))
            .await
            .unwrap();
        slowest = slowest.max(asked.elapsed());
    }
    assert_eq!(source.calls() - calls, 1, "one call for the fleet");
    assert!(
        slowest < Duration::from_secs(1),
        "a caller waited {slowest:?} for a lease nobody would publish ({:?} in all)",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pause_mid_load_keeps_every_caller_within_the_stale_window() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let backends: [(BackendOf, &str); 2] = [
        (Backend::redis, "paused-redis"),
        (Backend::tiered, "paused-tiered"),
    ];
    for (backend, name) in backends {
        let replicas: Vec<Runtime> = (0..4).map(|_| replica(backend(redis.url()))).collect();
        let policy = || policy(name, Duration::from_millis(500)).stale(Duration::from_secs(1));
        let caches: Vec<Cache<u64, u64, AppError>> = replicas
            .iter()
            .map(|runtime| cache(runtime, policy()))
            .collect();
        let source = Source::default();
        let started = Instant::now();
        let run = Duration::from_secs(4);
        let callers: Vec<_> = caches
            .iter()
            .map(|cache| {
                let (cache, source) = (cache.clone(), source.clone());
                tokio::spawn(async move {
                    let mut slowest = Duration::ZERO;
                    while started.elapsed() < run {
                        let asked = Instant::now();
                        bounded(source.load(&cache, 1, Duration::from_millis(200)))
                            .await
                            .unwrap();
                        slowest = slowest.max(asked.elapsed());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    slowest
                })
            })
            .collect();
        // Mid-load: a replica holds the lease and its origin call runs.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        eventually(|| source.running.load(Ordering::SeqCst) > 0).await;
        redis.cli(&["CLIENT", "PAUSE", "400"]);
        for caller in callers {
            let slowest = bounded(caller).await.unwrap();
            assert!(
                slowest < Duration::from_secs(1),
                "{name}: a caller waited {slowest:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfetch_refreshes_early_on_the_redis_backend() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let fresh = Duration::from_millis(1500);
    let cache: Cache<u64, u64, AppError> =
        cache(&runtime, policy("xfetch-redis", fresh).xfetch(8.0));
    let source = Source::default();
    source.set(1);
    source
        .load(&cache, 1, Duration::from_millis(200))
        .await
        .unwrap();
    source.set(2);
    let until = Instant::now() + fresh - Duration::from_millis(100);
    while Instant::now() < until {
        bounded(source.load(&cache, 1, Duration::from_millis(200)))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(cache.stats().early_refreshes >= 1, "{:?}", cache.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_cold_start_waiting_replicas_are_answered_with_the_leader() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<Runtime> = (0..8)
        .map(|_| replica(Backend::redis(redis.url())))
        .collect();
    let caches: Vec<Cache<u64, u64, AppError>> = replicas
        .iter()
        .map(|runtime| cache(runtime, policy("cold-start", Duration::from_secs(60))))
        .collect();
    let source = Source::default();
    let latency = Duration::from_millis(50);
    let start = Arc::new(tokio::sync::Barrier::new(caches.len() * 5));
    let callers: Vec<_> = caches
        .iter()
        .flat_map(|cache| std::iter::repeat_n(cache, 5))
        .map(|cache| {
            let (cache, source, start) = (cache.clone(), source.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let asked = Instant::now();
                source.load(&cache, 1, latency).await.unwrap();
                asked.elapsed()
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for caller in callers {
        slowest = slowest.max(bounded(caller).await.unwrap());
    }
    assert_eq!(source.calls(), 1);
    // Woken by the leader's notice, not by a timer or the end of a lease: each replica read
    // the store a handful of times (the read that found the lease held, the read that
    // registered the wait, the read after the notice), and none waited anywhere near its
    // lease. Counts, not a tight time: a loaded machine delays a wake-up, not a read.
    for runtime in &replicas {
        let stats = runtime.backend_stats().expect("connected");
        assert!(
            stats.hits + stats.misses <= READS_PER_WAIT,
            "a replica read the store {} times for one load elsewhere: {stats:?}",
            stats.hits + stats.misses
        );
    }
    assert!(
        slowest < Duration::from_secs(1),
        "a caller waited {slowest:?} for a {latency:?} origin"
    );
}

/// The most reads of one key a replica makes while another replica's load of it runs,
/// woken by that load's notice: three for the wait (found the lease held, registered the
/// wait, read after the notice), one more for a wait woken early, and one per caller that
/// a busy machine schedules after the wait ended (the redis backend keeps no memory copy).
/// Polling instead would read about once per millisecond of the 50 ms load.
const READS_PER_WAIT: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_arrive_late_do_not_open_the_breaker() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let node = replica(Backend::redis(redis.url()));
    let cache: Cache<u64, u64, AppError> = cache(&node, policy("late", Duration::from_millis(50)));
    let source = Source::default();
    source.load(&cache, 0, Duration::ZERO).await.unwrap();
    // Every answer comes 100 ms past the 250 ms response timeout: late, never lost, as
    // from a client too starved to read them in time.
    redis.proxy().delay_replies(Duration::from_millis(350));
    for key in 1..=12 {
        assert_eq!(
            bounded(source.load(&cache, key, Duration::ZERO)).await,
            Ok(0)
        );
    }
    let stats = node.backend_stats().unwrap();
    redis.proxy().delay_replies(Duration::ZERO);
    assert_eq!(stats.breaker_opened, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_made_while_degraded_is_served_no_longer_than_the_stale_window() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let (fresh, stale) = (Duration::from_secs(20), Duration::from_millis(400));
    let cache: Cache<u64, u64, AppError> =
        cache(&runtime, policy("degraded-bound", fresh).stale(stale));
    let source = Source::default();
    source.load(&cache, 99, Duration::ZERO).await.unwrap();
    redis.black_hole();
    source.set(1);
    assert_eq!(source.load(&cache, 1, Duration::ZERO).await, Ok(1));
    let loaded = Instant::now();
    assert_eq!(
        source.load(&cache, 1, Duration::ZERO).await,
        Ok(1),
        "a copy"
    );
    source.set(2);
    tokio::time::sleep(stale + Duration::from_millis(100)).await;
    let later = bounded(source.load(&cache, 1, Duration::ZERO)).await;
    assert_eq!(
        later,
        Ok(2),
        "a copy nobody could invalidate, served {:?} after it was loaded",
        loaded.elapsed()
    );
    redis.heal();
}

/// A value loaded while Redis could not be read is no fail-safe past the degraded bound
/// either: no invalidation reaches it, and the simulator saw one served as the last good
/// value seconds after another replica's invalidation had returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_made_while_degraded_is_no_fail_safe_past_the_degraded_bound() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let runtime = replica(Backend::redis(redis.url()));
    let (fresh, stale) = (Duration::from_millis(300), Duration::from_millis(200));
    let policy = policy("degraded-fail-safe", fresh)
        .stale(stale)
        .stale_if_error(Duration::from_secs(30));
    let cache: Cache<u64, u64, AppError> = cache(&runtime, policy);
    let source = Source::default();
    source.load(&cache, 99, Duration::ZERO).await.unwrap();
    redis.black_hole();
    source.set(1);
    assert_eq!(source.load(&cache, 1, Duration::ZERO).await, Ok(1));
    tokio::time::sleep(fresh + stale + Duration::from_millis(100)).await;
    let failing = bounded(cache.load(1, || async { Err(AppError::Down(1)) })).await;
    assert_eq!(
        failing,
        Err(AppError::Down(1)),
        "a value nobody could invalidate, served as the last good one past its bound"
    );
    redis.heal();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_never_bring_back_a_version_an_invalidation_retired() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    type Row = (String, u64);
    redis.cli(&["CONFIG", "SET", "maxmemory", "3mb"]);
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let replicas: Vec<Runtime> = vec![
        replica(Backend::redis(redis.url())),
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    ];
    let caches: Vec<Cache<u64, Row, AppError>> = replicas
        .iter()
        .map(|runtime| {
            let (fresh, stale) = (Duration::from_secs(60), Duration::from_secs(2));
            let policy = policy("evicted", fresh).stale(stale).build().unwrap();
            Cache::builder(policy)
                .runtime(runtime)
                .source_version(|row: &Row| row.1)
                .build()
        })
        .collect();
    // A writer filling memory past its limit, so Redis evicts any key, ours included.
    let mut filler = std::process::Command::new("redis-benchmark")
        .args(["-p", &redis.port().to_string(), "-q", "-t", "set"])
        .args([
            "-n",
            "100000000",
            "-r",
            "100000000",
            "-d",
            "2000",
            "-c",
            "2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-benchmark runs");
    let evicted = || -> u64 {
        (redis.cli(&["INFO", "stats"]).lines())
            .find_map(|line| line.strip_prefix("evicted_keys:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    // Memory at its limit before the first load, so Redis evicts from the first key on,
    // however slowly the writer starts on a busy machine.
    bounded(async {
        while evicted() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let evicted_before = evicted();
    let version = Arc::new(AtomicU64::new(0));
    let load = |cache: &Cache<u64, Row, AppError>, key: u64| {
        let version = version.clone();
        let cache = cache.clone();
        async move {
            cache
                .load(key, move || async move {
                    let read = version.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok((format!("v{read}"), read))
                })
                .await
        }
    };
    let mut older = Vec::new();
    for key in 0..150u64 {
        version.store(1, Ordering::SeqCst);
        for cache in &caches {
            bounded(load(cache, key)).await.unwrap();
        }
        // Loads racing invalidations delivered out of order, then the last change.
        let racing: Vec<_> = caches
            .iter()
            .map(|cache| tokio::spawn(load(cache, key)))
            .collect();
        let mut versions = [2u64, 3];
        if key % 2 == 0 {
            versions.reverse();
        }
        for (i, at) in versions.into_iter().enumerate() {
            version.fetch_max(at, Ordering::SeqCst);
            let _ = bounded(caches[i % 3].invalidate_at(&key, at)).await;
        }
        version.store(4, Ordering::SeqCst);
        let last = &caches[key as usize % 3];
        while bounded(last.invalidate_at(&key, 4)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for racer in racing {
            let _ = bounded(racer).await.unwrap();
        }
        eventually(|| {
            replicas.iter().all(|runtime| {
                runtime
                    .backend_stats()
                    .is_none_or(|stats| !stats.degraded_now)
            })
        })
        .await;
        // The last invalidation's notice reaches the tiered replicas' memory: until it is
        // heard a copy there may still be a retired version (delivery is the bound), so the
        // wait is for its effect, not for a time a busy machine overruns. A retired
        // version stored after the notice would never go: that fails here, at the deadline.
        let held = || -> Vec<Option<u64>> {
            (caches.iter())
                .map(|cache| cache.peek(&key).map(|(_, read)| read))
                .collect()
        };
        let deadline = std::time::Instant::now() + common::DEADLINE;
        while held().iter().any(|read| read.is_some_and(|read| read < 4)) {
            // Which replica kept which version, for whoever reads the failure.
            assert!(
                std::time::Instant::now() < deadline,
                "key {key}: a retired version stayed in memory (per replica: redis, tiered, tiered): {:?}",
                held()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for (replica, cache) in caches.iter().enumerate() {
            let (_, read) = bounded(load(cache, key)).await.unwrap();
            if read < 4 {
                older.push((key, replica, read));
            }
        }
    }
    let evicted = evicted() - evicted_before;
    let _ = filler.kill();
    let _ = filler.wait();
    assert!(
        evicted >= 100,
        "Redis evicted only {evicted} keys during the loads"
    );
    assert!(
        older.is_empty(),
        "{} loads after the last invalidation answered an older version (key, replica, version): {older:?}",
        older.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_elsewhere_leaves_a_tiered_copy_serving_while_the_newer_value_is_read() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (one, other) = (
        replica(Backend::tiered(redis.url())),
        replica(Backend::tiered(redis.url())),
    );
    let policy = || policy("demoted", Duration::from_secs(60)).stale(Duration::from_secs(60));
    let (reader, refresher): (Cache<u64, u64, _>, Cache<u64, u64, _>) =
        (cache(&one, policy()), cache(&other, policy()));
    let source = Source::default();
    source.load(&reader, 99, Duration::ZERO).await.unwrap();
    subscribed(&one).await;
    source.set(1);
    assert_eq!(source.load(&reader, 1, Duration::ZERO).await, Ok(1));
    let misses = reader.stats().misses;
    source.set(2);
    let before = received(&one);
    bounded(refresher.refresh(1, || async { Ok(2) }))
        .await
        .unwrap();
    notices_beyond(&one, before, 1).await;
    // The copy answers at once (as stale, once the notice is handled), and the newer value
    // is read behind it.
    bounded(async {
        while source.load(&reader, 1, Duration::ZERO).await != Ok(2) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    let stats = reader.stats();
    assert_eq!(stats.misses, misses, "no caller waited for the newer value");
    assert!(
        stats.stale_hits >= 1,
        "served as stale meanwhile: {stats:?}"
    );
    assert_eq!(
        source.calls(),
        2,
        "read from Redis, not the origin: {stats:?}"
    );
}

/// Redis evicting a value tells no replica: a tiered replica keeps its copy. Another
/// replica then loads the key anew (a newer version) and publishes it, whose notice only
/// makes that copy stale. An invalidation at the newer version is late for the store,
/// which holds it already, yet must still retire the older copy: no call after it
/// returned gets a version it retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_invalidation_retires_an_older_copy_that_a_newer_publish_left_stale() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    type Row = (String, u64);
    let (holding, loading) = (
        common::patient_replica(Backend::tiered(redis.url())),
        common::patient_replica(Backend::tiered(redis.url())),
    );
    let build = |runtime: &Runtime| -> Cache<u64, Row, AppError> {
        let policy = policy("late-invalidation", Duration::from_secs(60))
            .stale(Duration::from_secs(60))
            .build()
            .unwrap();
        Cache::builder(policy)
            .runtime(runtime)
            .source_version(|row: &Row| row.1)
            .build()
    };
    let (held, other) = (build(&holding), build(&loading));
    let row = |version: u64| move || async move { Ok((format!("v{version}"), version)) };
    // Both subscribed, and the holding replica's copy of version 3 kept in memory.
    bounded(async {
        loop {
            let _ = other.load(1, row(1)).await;
            let _ = held.load(7, row(3)).await;
            let up = |runtime: &Runtime| runtime.backend_stats().is_some_and(|s| s.subscribed);
            if up(&holding) && up(&loading) && held.peek(&7).is_some() {
                return;
            }
            held.invalidate(&7).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(held.peek(&7), Some(("v3".into(), 3)));
    // Redis evicts the value (here by hand): no notice.
    let keys = redis.cli(&["--scan", "--pattern", "*late-invalidation*"]);
    let value = (keys.lines())
        .find(|key| key.ends_with(":7}"))
        .expect("the value's key");
    redis.cli(&["DEL", value]);
    // The other replica loads version 4 and publishes it: the copy of 3 turns stale.
    let heard = holding.backend_stats().unwrap().notices_received;
    assert_eq!(bounded(other.load(7, row(4))).await, Ok(("v4".into(), 4)));
    eventually(|| holding.backend_stats().unwrap().notices_received > heard).await;
    // Version 4 retires every older one; the store holds 4 already.
    bounded(other.invalidate_at(&7, 4)).await.unwrap();
    eventually(|| held.peek(&7).is_none_or(|(_, version)| version >= 4)).await;
    assert_eq!(bounded(held.load(7, row(5))).await.unwrap().1, 4);
}
