//! The Redis backend against a real `redis-server` each test starts for itself (and, in
//! `cluster`, a local three-master Redis Cluster).
use super::*;
use crate::shared::store::{
    BreakerState, Holder, Invalidated, Lease, LeaseFor, LeaseRequest, LeaseToken, Notice,
    NoticeKind, Publication, Published, Read, SharedStore, StoreEvent, Wake, WriteThrough,
};
use crate::shared::wire::{Header, Wire};
use std::future::Future;
use std::time::Instant;
use testkit::RedisServer;

pub(super) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);
/// Scheduling slack on top of the response timeout, for a machine busy compiling.
pub(super) const SLACK: Duration = Duration::from_millis(200);
/// Generous bound for anything that must happen "at once" on a loaded machine.
pub(super) const PROMPTLY: Duration = Duration::from_secs(5);

/// The next event that is not a passage (each taken, as a listener does): renewals of the
/// hearing lease send one a few times a second.
pub(super) async fn next_event(
    events: &mut tokio::sync::broadcast::Receiver<StoreEvent>,
) -> StoreEvent {
    loop {
        match events.recv().await.expect("the hub is alive") {
            StoreEvent::Passage(passage) => passage.taken(),
            event => return event,
        }
    }
}

fn config(url: String) -> RedisConfig {
    RedisConfig {
        response_timeout: RESPONSE_TIMEOUT,
        breaker_cooldown: Duration::from_millis(100),
        heartbeat: Duration::from_millis(50),
        ..RedisConfig::new(url)
    }
}

fn store(redis: &RedisServer) -> RedisStore {
    RedisStore::connect(config(redis.url())).unwrap()
}

fn key(name: &str) -> EntryKey {
    EntryKey::new("stampede", name, 1, &("acme", 42u64)).unwrap()
}

pub(super) async fn within<T>(bound: Duration, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(bound, future)
        .await
        .expect("bounded wait passed")
}

pub(super) async fn subscribed(store: &RedisStore) {
    let mut subscription = store.subscription();
    within(PROMPTLY, subscription.up()).await;
}

/// A value loaded now, fresh for 10 s, kept for 60 s, by the server's clock.
pub(super) fn publication(
    read: &Read,
    fence: u64,
    value: &str,
    source_version: Option<u64>,
) -> Publication {
    let now = read.clock.now_ms();
    let header = Header {
        fresh_until_ms: now + 10_000,
        stale_until_ms: now + 20_000,
        keep_until_ms: now + 60_000,
        loaded_at_ms: now,
        delta: 0.01,
        fence,
        source_version,
    };
    Publication {
        fence,
        token: None,
        envelope: Wire::default()
            .encode(&header, &[], &value.to_owned())
            .unwrap(),
        keep_until_ms: header.keep_until_ms,
        source_version,
        recompute: Duration::from_millis(10),
        incarnation: read.incarnation.clone(),
        write_through: None,
    }
}

/// [`publication`] by the holder of `lease`, whose publish ends it.
pub(super) fn held(
    read: &Read,
    lease: &Option<LeaseRequest>,
    value: &str,
    source_version: Option<u64>,
) -> Publication {
    Publication {
        token: lease.map(|lease| lease.token),
        ..publication(read, read.fence, value, source_version)
    }
}

/// A request for the key's lease, under a token of its own.
pub(super) fn asking(purpose: LeaseFor) -> Option<LeaseRequest> {
    Some(LeaseRequest {
        purpose,
        ttl: Duration::from_secs(5),
        token: LeaseToken::new(),
        quiet_after: None,
        held_after: None,
        recompute: None,
    })
}

pub(super) fn value_of(read: &Read) -> Option<String> {
    let bytes = read.envelope.as_ref()?;
    Some(Wire::default().decode::<String>(bytes).unwrap().2)
}

pub(super) fn miss_lease() -> Option<LeaseRequest> {
    asking(LeaseFor::Miss)
}

/// How many times the server ran `command` (from `INFO commandstats`).
fn calls_of(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_value_is_read_without_the_script_and_anything_else_with_it() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    // The permission probe at start runs PTTL (in a script) too: counted before.
    within(Duration::from_secs(5), async {
        while !store
            .client
            .probed
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let key = key("fast");
    let lease = miss_lease();
    let first = store.read(&key, lease).await.unwrap();
    let Lease::Granted { .. } = first.lease else {
        panic!("{:?}", first.lease)
    };
    let stored = store.publish(&key, held(&first, &lease, "ada", None)).await;
    assert_eq!(stored, Ok(Published::Stored));
    let scripts = calls_of(&redis, "evalsha");
    let pttl_before = calls_of(&redis, "pttl");

    // Fresh, with a clock from the last script read: one MGET, and the same answer the
    // script gives (value, the key's fence, no lease).
    let fast = store.read(&key, miss_lease()).await.unwrap();
    assert_eq!(value_of(&fast).as_deref(), Some("ada"));
    assert_eq!(fast.lease, Lease::NotTaken);
    let fence_now = fence_of(&redis.cli(&["GET", &key.fence()])).unwrap();
    assert_eq!(fast.fence, fence_now);
    assert_eq!(calls_of(&redis, "evalsha"), scripts, "no script ran");
    assert_eq!(
        (
            calls_of(&redis, "mget"),
            calls_of(&redis, "pttl") - pttl_before
        ),
        (1, 1),
        "one round trip"
    );

    // A refresh takes the lease whatever is stored: always the script.
    let refresh = asking(LeaseFor::Refresh);
    assert!(matches!(
        store.read(&key, refresh).await.unwrap().lease,
        Lease::Granted { .. }
    ));
    assert_eq!(calls_of(&redis, "evalsha"), scripts + 1);

    // No fence counter: the script, which makes one.
    redis.cli(&["DEL", &key.fence()]);
    store.read(&key, None).await.unwrap();
    assert_eq!(calls_of(&redis, "evalsha"), scripts + 2);

    // Near its fresh time (here: past it), the script decides.
    let read = store.read(&key, None).await.unwrap();
    let now = read.clock.now_ms();
    let header = Header {
        fresh_until_ms: now,
        stale_until_ms: now + 20_000,
        keep_until_ms: now + 60_000,
        loaded_at_ms: now,
        delta: 0.01,
        fence: read.fence,
        source_version: None,
    };
    let bytes = Wire::default()
        .encode(&header, &[], &"old".to_owned())
        .unwrap();
    redis::cmd("SET")
        .arg(key.value())
        .arg(bytes)
        .arg("PX")
        .arg(60_000)
        .exec_async(&mut store.client.connection().expect("a server's connection"))
        .await
        .unwrap();
    let before = calls_of(&redis, "evalsha");
    let stale = store.read(&key, None).await.unwrap();
    assert_eq!(value_of(&stale).as_deref(), Some("old"));
    assert_eq!(calls_of(&redis, "evalsha"), before + 1);

    // Without a recent clock: the script.
    *store.client.clock.lock().unwrap() = None;
    store.read(&key, None).await.unwrap();
    assert_eq!(calls_of(&redis, "evalsha"), before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_value_round_trips_and_releases_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("round-trip");

    let lease = miss_lease();
    let first = store.read(&key, lease).await.unwrap();
    assert_eq!(first.envelope, None);
    let Lease::Granted { fence, .. } = first.lease else {
        panic!("{:?}", first.lease)
    };
    let token = lease.unwrap().token;
    let recorded = redis.cli(&["GET", &key.lease()]);
    assert!(
        recorded.starts_with(&format!("{fence} {token} ")),
        "the lease names its fence and its replica's token: {recorded}"
    );

    let outcome = store.publish(&key, held(&first, &lease, "ada", None)).await;
    assert_eq!(outcome, Ok(Published::Stored));
    assert_eq!(
        redis.cli(&["EXISTS", &key.lease()]),
        "0",
        "the owner's publish frees the lease"
    );
    let ttl: u64 = redis.cli(&["PTTL", key.value()]).parse().unwrap();
    assert!(
        ttl > 50_000 && ttl <= 60_000,
        "PX is keep_until - now: {ttl}"
    );

    let second = store.read(&key, miss_lease()).await.unwrap();
    assert_eq!(value_of(&second).as_deref(), Some("ada"));
    assert_eq!(
        second.lease,
        Lease::NotTaken,
        "a servable value is returned instead of a lease"
    );
    let stats = store.stats();
    assert_eq!((stats.hits, stats.misses, stats.errors), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_is_reported_and_a_refresh_takes_one_over_a_servable_value() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (store(&redis), store(&redis));
    let key = key("held");

    let lease = miss_lease();
    let read = a.read(&key, lease).await.unwrap();
    let Lease::Granted { fence, .. } = read.lease else {
        panic!()
    };
    let waiting = b.read(&key, miss_lease()).await.unwrap();
    let Lease::HeldBy(Holder {
        remaining, replica, ..
    }) = waiting.lease
    else {
        panic!("{:?}", waiting.lease)
    };
    assert!(remaining <= Duration::from_secs(5) && remaining > Duration::ZERO);
    let holder = LeaseToken::of_replica(a.replica());
    assert_eq!(
        holder.replica(),
        u32::from_str_radix(&a.replica()[..8], 16).unwrap()
    );
    assert_eq!(
        replica,
        Some(lease.unwrap().token.replica()),
        "the holder's tag"
    );

    a.publish(&key, held(&read, &lease, "v1", None))
        .await
        .unwrap();
    let refresh = asking(LeaseFor::Refresh);
    let refreshing = b.read(&key, refresh).await.unwrap();
    assert_eq!(value_of(&refreshing).as_deref(), Some("v1"));
    let Lease::Granted { fence: newer, .. } = refreshing.lease else {
        panic!()
    };
    assert!(newer > fence);

    // A holder silent past `quiet_after` is taken over.
    let impatient = asking(LeaseFor::Miss).map(|request| LeaseRequest {
        quiet_after: Some(Duration::ZERO),
        ..request
    });
    a.invalidate(&key).await.unwrap();
    let first = a.read(&key, miss_lease()).await.unwrap();
    assert!(matches!(
        first.lease,
        Lease::Granted {
            took_over: false,
            ..
        }
    ));
    let taking = b.read(&key, impatient).await.unwrap();
    assert!(
        matches!(
            taking.lease,
            Lease::Granted {
                took_over: true,
                ..
            }
        ),
        "{:?}",
        taking.lease
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_is_refused_after_an_invalidation_or_a_newer_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);

    // Without a lease: the fence seen by the read must still stand.
    let key1 = key("fenced-by-invalidation");
    let read = store.read(&key1, None).await.unwrap();
    assert!(matches!(
        store.invalidate(&key1).await,
        Ok(Invalidated::Fenced { .. })
    ));
    let late = store
        .publish(&key1, publication(&read, read.fence, "old", None))
        .await;
    assert_eq!(late, Ok(Published::RefusedByFence));
    assert_eq!(redis.cli(&["EXISTS", key1.value()]), "0");

    // A lease owner whose lease lapsed while another replica took a newer one.
    let key2 = key("fenced-by-lease");
    let paused = store.read(&key2, miss_lease()).await.unwrap();
    let Lease::Granted { fence: old, .. } = paused.lease else {
        panic!()
    };
    redis.cli(&["DEL", &key2.lease()]); // the lease expired
    let taker = store.read(&key2, miss_lease()).await.unwrap();
    let Lease::Granted { fence: new, .. } = taker.lease else {
        panic!()
    };
    assert!(new > old);
    assert_eq!(
        store
            .publish(&key2, publication(&taker, new, "new", None))
            .await,
        Ok(Published::Stored)
    );
    assert_eq!(
        store
            .publish(&key2, publication(&paused, old, "old", None))
            .await,
        Ok(Published::RefusedByFence)
    );
    let read = store.read(&key2, None).await.unwrap();
    assert_eq!(value_of(&read).as_deref(), Some("new"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_releases_a_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("release");
    let lease = miss_lease();
    let Lease::Granted { .. } = store.read(&key, lease).await.unwrap().lease else {
        panic!()
    };
    assert_eq!(store.release(&key, LeaseToken::new()).await, Ok(false));
    assert_eq!(redis.cli(&["EXISTS", &key.lease()]), "1");
    assert_eq!(store.release(&key, lease.unwrap().token).await, Ok(true));
    assert_eq!(redis.cli(&["EXISTS", &key.lease()]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_invalidations_change_nothing_and_old_sources_are_not_stored() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("versions");

    let read = store.read(&key, miss_lease()).await.unwrap();
    let Lease::Granted { fence, .. } = read.lease else {
        panic!()
    };
    store
        .publish(&key, publication(&read, fence, "v42", Some(42)))
        .await
        .unwrap();
    // At or below the stored value's own version: it arrived late.
    assert_eq!(store.invalidate_at(&key, 41).await, Ok(Invalidated::Late));
    assert_eq!(store.invalidate_at(&key, 42).await, Ok(Invalidated::Late));
    assert_eq!(
        value_of(&store.read(&key, None).await.unwrap()).as_deref(),
        Some("v42")
    );

    let Ok(Invalidated::Fenced { .. }) = store.invalidate_at(&key, 43).await else {
        panic!()
    };
    assert_eq!(
        store.invalidate_at(&key, 42).await,
        Ok(Invalidated::Late),
        "below the mark"
    );
    let lease = miss_lease();
    let read = store.read(&key, lease).await.unwrap();
    assert_eq!(read.envelope, None);
    let Lease::Granted { .. } = read.lease else {
        panic!()
    };
    // A lagging replica read version 40 after the invalidation for 43.
    assert_eq!(
        store
            .publish(&key, held(&read, &lease, "v40", Some(40)))
            .await,
        Ok(Published::RefusedBySourceVersion)
    );
    assert_eq!(
        redis.cli(&["EXISTS", &key.lease()]),
        "0",
        "a refused owner frees its lease"
    );

    // Versions above 2^53 compare exactly (a double would round these to one number).
    let big = EntryKey::new("stampede", "versions", 1, &"big").unwrap();
    assert!(matches!(
        store.invalidate_at(&big, u64::MAX - 1).await,
        Ok(Invalidated::Fenced { .. })
    ));
    assert!(matches!(
        store.invalidate_at(&big, u64::MAX).await,
        Ok(Invalidated::Fenced { .. })
    ));
    assert_eq!(
        store.invalidate_at(&big, u64::MAX - 1).await,
        Ok(Invalidated::Late)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_fence_counter_restarts_above_every_earlier_fence() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("lost-fence");
    let lease = miss_lease();
    let read = store.read(&key, lease).await.unwrap();
    let Lease::Granted { fence: first, .. } = read.lease else {
        panic!()
    };
    store
        .publish(&key, held(&read, &lease, "v1", None))
        .await
        .unwrap();
    // A paused loader holds an older fence when the counter is lost.
    let refresh = asking(LeaseFor::Refresh);
    let paused = store.read(&key, refresh).await.unwrap();
    let Lease::Granted {
        fence: paused_fence,
        ..
    } = paused.lease
    else {
        panic!()
    };
    redis.cli(&["DEL", &key.fence(), &key.lease()]);

    let taker = store.read(&key, asking(LeaseFor::Refresh)).await.unwrap();
    let Lease::Granted {
        fence: restarted, ..
    } = taker.lease
    else {
        panic!()
    };
    assert!(restarted > paused_fence && restarted > first);
    assert_eq!(
        store
            .publish(&key, publication(&paused, paused_fence, "old", None))
            .await,
        Ok(Published::RefusedByFence)
    );
}

/// Puts something that is not ours at one of a key's entries.
type Plant = fn(&EntryKey) -> Vec<String>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_bytes_wrong_types_and_keys_without_ttl_never_wedge_a_key() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let wire = Wire::default();

    // Corrupt bytes where an envelope should be: returned, fail to decode, not servable.
    let corrupt = key("corrupt");
    redis.cli(&["SET", corrupt.value(), "STPD\u{3}garbage", "PX", "60000"]);
    let read = within(PROMPTLY, store.read(&corrupt, miss_lease()))
        .await
        .unwrap();
    let bytes = read.envelope.as_deref().unwrap();
    assert!(wire.decode::<String>(bytes).is_err());
    let Lease::Granted { fence, .. } = read.lease else {
        panic!("{:?}", read.lease)
    };
    assert_eq!(
        store
            .publish(&corrupt, publication(&read, fence, "repaired", None))
            .await,
        Ok(Published::Stored)
    );

    // Another type at each of our keys, and a value, a lease and a fence without a TTL.
    let cases: [(&str, Plant); 7] = [
        ("value-without-ttl", |k| {
            vec!["SET".into(), k.value().into(), "STPD\u{3}no ttl".into()]
        }),
        ("wrong-type-value", |k| {
            vec!["LPUSH".into(), k.value().into(), "x".into()]
        }),
        ("wrong-type-lease", |k| {
            vec!["HSET".into(), k.lease(), "a".into(), "b".into()]
        }),
        ("wrong-type-fence", |k| {
            vec!["SADD".into(), k.fence(), "x".into()]
        }),
        ("lease-without-ttl", |k| {
            vec!["SET".into(), k.lease(), "7 00ff 1".into()]
        }),
        ("lease-not-ours", |k| {
            vec![
                "SET".into(),
                k.lease(),
                "7".into(),
                "PX".into(),
                "60000".into(),
            ]
        }),
        ("fence-not-a-number", |k| {
            vec!["SET".into(), k.fence(), "1e400".into()]
        }),
    ];
    for (name, plant) in cases {
        let key = key(name);
        let command = plant(&key);
        redis.cli(&command.iter().map(String::as_str).collect::<Vec<_>>());
        let read = within(PROMPTLY, store.read(&key, miss_lease()))
            .await
            .unwrap();
        assert_eq!(read.envelope, None, "{name}");
        let Lease::Granted { fence, .. } = read.lease else {
            panic!("{name}: {:?}", read.lease)
        };
        let stored = within(
            PROMPTLY,
            store.publish(&key, publication(&read, fence, name, None)),
        )
        .await;
        assert_eq!(stored, Ok(Published::Stored), "{name}");
        let read = store.read(&key, None).await.unwrap();
        assert_eq!(value_of(&read).as_deref(), Some(name));
    }
    // The invalidation path over a wrong-type fence (which holds the mark).
    let marked = key("wrong-type-mark");
    redis.cli(&["LPUSH", &marked.fence(), "x"]);
    assert!(matches!(
        store.invalidate_at(&marked, 5).await,
        Ok(Invalidated::Fenced { .. })
    ));
    assert_eq!(store.stats().errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_reload_after_script_flush() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("noscript");
    store.read(&key, None).await.unwrap();
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(store.read(&key, None).await.is_ok());
    assert!(store.invalidate(&key).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_from_one_replica_wakes_a_waiter_on_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (store(&redis), store(&redis));
    subscribed(&a).await;
    subscribed(&b).await;
    let key = key("notice");
    let mut events = b.events();
    let mut own = a.events();
    // Each hears the key's notices (its bucket), as a load does before its first read.
    let _a_heard = a.listen(&key).await;

    let read = a.read(&key, miss_lease()).await.unwrap();
    let Lease::Granted { fence, .. } = read.lease else {
        panic!()
    };
    let _heard = b.listen(&key).await;
    let waiter = b.watch(&key);
    a.publish(&key, publication(&read, fence, "v", None))
        .await
        .unwrap();

    let Wake::Notice(notice) = within(PROMPTLY, waiter).await.unwrap() else {
        panic!()
    };
    assert_eq!(
        (notice.kind, notice.fence, notice.own),
        (NoticeKind::Published, fence, false)
    );
    assert_eq!(notice.key, key.value());
    let StoreEvent::Notice(seen) = within(PROMPTLY, next_event(&mut events)).await else {
        panic!()
    };
    assert_eq!(seen, notice);
    let StoreEvent::Notice(mine) = within(PROMPTLY, next_event(&mut own)).await else {
        panic!()
    };
    assert!(mine.own, "a replica can tell its own notices");

    let _heard = a.listen(&key).await;

    let waiter = a.watch(&key);
    let Ok(Invalidated::Fenced { fence }) = b.invalidate(&key).await else {
        panic!()
    };
    let Wake::Notice(notice) = within(PROMPTLY, waiter).await.unwrap() else {
        panic!()
    };
    assert_eq!(
        (notice.kind, notice.fence),
        (NoticeKind::Invalidated, fence)
    );
    // `a` has seen its own publish and `b`'s invalidation.
    let (a, b) = (a.stats(), b.stats());
    assert_eq!(
        (a.notices_sent, a.notices_received, b.notices_sent),
        (1, 2, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_subscription_is_reported_and_restored() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    subscribed(&store).await;
    let mut events = store.events();
    let _heard = store.listen(&key("dropped")).await;
    let waiter = store.watch(&key("dropped"));
    redis.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert_eq!(
        within(PROMPTLY, waiter).await.unwrap(),
        Wake::SubscriptionLost
    );
    assert_eq!(
        within(PROMPTLY, next_event(&mut events)).await,
        StoreEvent::SubscriptionLost
    );
    assert!(matches!(
        within(PROMPTLY, next_event(&mut events)).await,
        StoreEvent::Subscribed(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_at_start_up_only_fails_calls() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = RedisStore::connect(config(format!("redis://127.0.0.1:{port}/"))).unwrap();
    let started = Instant::now();
    assert!(store.read(&key("down"), None).await.is_err());
    assert!(started.elapsed() <= RESPONSE_TIMEOUT + SLACK);
}

/// Reads until one succeeds, within `bound`.
async fn recovered(store: &RedisStore, key: &EntryKey, bound: Duration) {
    within(bound, async {
        loop {
            if store.read(key, None).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_fails_calls_fast_opens_the_breaker_and_recovers_after_restart() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("killed");
    store.read(&key, None).await.unwrap();

    redis.kill();
    for _ in 0..DEFAULT_BREAKER_FAILURES {
        let started = Instant::now();
        let failed = store.read(&key, None).await;
        assert!(failed.is_err());
        assert!(started.elapsed() <= RESPONSE_TIMEOUT + SLACK);
        if store.stats().breaker != BreakerState::Closed {
            break;
        }
    }
    assert_ne!(store.stats().breaker, BreakerState::Closed);
    assert_eq!(store.stats().breaker_opened, 1);

    redis.restart();
    recovered(&store, &key, PROMPTLY).await;
    assert_eq!(store.stats().breaker, BreakerState::Closed);
    subscribed(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_redis_answers_every_call_within_the_response_timeout() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = Arc::new(store(&redis));
    let key = key("black-hole");
    store.read(&key, None).await.unwrap();

    redis.black_hole();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (store, key) = (Arc::clone(&store), key.clone());
            tokio::spawn(async move {
                let started = Instant::now();
                let outcome = store.read(&key, miss_lease()).await;
                (outcome.is_err(), started.elapsed())
            })
        })
        .collect();
    for call in calls {
        let (failed, took) = within(PROMPTLY, call).await.unwrap();
        assert!(failed);
        assert!(
            took <= RESPONSE_TIMEOUT + Duration::from_millis(100),
            "{took:?}"
        );
    }
    // No answer even within the grace after the timeouts: the breaker opens.
    within(PROMPTLY, async {
        while store.stats().breaker == BreakerState::Closed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(store.read(&key, None).await, Err(StoreError::Unavailable));

    redis.heal();
    recovered(&store, &key, PROMPTLY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lease_per_key_among_concurrent_readers_of_several_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas: Vec<_> = (0..4).map(|_| Arc::new(store(&redis))).collect();
    let key = key("contended");
    let reads: Vec<_> = replicas
        .iter()
        .flat_map(|replica| (0..8).map(move |_| Arc::clone(replica)))
        .map(|replica| {
            let key = key.clone();
            tokio::spawn(async move { replica.read(&key, miss_lease()).await.unwrap().lease })
        })
        .collect();
    let (mut granted, mut held) = (0, 0);
    for read in reads {
        match within(PROMPTLY, read).await.unwrap() {
            Lease::Granted { .. } => granted += 1,
            Lease::HeldBy { .. } => held += 1,
            Lease::NotTaken => panic!("nothing servable was stored"),
        }
    }
    assert_eq!((granted, held), (1, 31));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_past_keep_until_stores_nothing_and_frees_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("expired");
    let lease = miss_lease();
    let read = store.read(&key, lease).await.unwrap();
    let Lease::Granted { .. } = read.lease else {
        panic!()
    };
    let mut late = held(&read, &lease, "late", None);
    late.keep_until_ms = read.clock.now_ms().saturating_sub(60_000);
    assert_eq!(
        store.publish(&key, late).await,
        Ok(Published::AlreadyExpired)
    );
    assert_eq!(redis.cli(&["EXISTS", key.value(), &key.lease()]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_closes_the_breaker_without_any_caller() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    subscribed(&store).await;
    let mut events = store.events();
    redis.kill();
    // Only the heartbeat talks to Redis from here on.
    assert_eq!(
        within(PROMPTLY, next_event(&mut events)).await,
        StoreEvent::SubscriptionLost
    );
    within(PROMPTLY, async {
        while store.stats().breaker == BreakerState::Closed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    redis.restart();
    assert!(matches!(
        within(PROMPTLY, next_event(&mut events)).await,
        StoreEvent::Subscribed(_)
    ));
    within(PROMPTLY, async {
        while store.stats().breaker != BreakerState::Closed {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!((store.stats().hits, store.stats().misses), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_older_than_the_stored_source_version_is_refused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("older-than-stored");
    // Two lease-less readers get the same fence; one reads the source at 9, one at 12.
    let slow = store.read(&key, None).await.unwrap();
    let fast = store.read(&key, None).await.unwrap();
    assert_eq!(slow.fence, fast.fence);
    assert_eq!(
        store
            .publish(&key, publication(&fast, fast.fence, "v12", Some(12)))
            .await,
        Ok(Published::Stored)
    );
    assert_eq!(
        store
            .publish(&key, publication(&slow, slow.fence, "v9", Some(9)))
            .await,
        Ok(Published::RefusedBySourceVersion)
    );
    assert_eq!(
        value_of(&store.read(&key, None).await.unwrap()).as_deref(),
        Some("v12")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_invalidation_still_raises_the_source_version_mark() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("late-raises-mark");
    let read = store.read(&key, miss_lease()).await.unwrap();
    let Lease::Granted { fence, .. } = read.lease else {
        panic!()
    };
    store
        .publish(&key, publication(&read, fence, "v12", Some(12)))
        .await
        .unwrap();
    for version in 10..=12 {
        assert_eq!(
            store.invalidate_at(&key, version).await,
            Ok(Invalidated::Late)
        );
    }
    // The value goes (an unversioned invalidation); version 12 stays the newest known.
    assert!(matches!(
        store.invalidate(&key).await,
        Ok(Invalidated::Fenced { .. })
    ));
    let read = store.read(&key, miss_lease()).await.unwrap();
    let Lease::Granted { fence, .. } = read.lease else {
        panic!()
    };
    assert_eq!(
        store
            .publish(&key, publication(&read, fence, "v11", Some(11)))
            .await,
        Ok(Published::RefusedBySourceVersion)
    );
    assert_eq!(store.read(&key, None).await.unwrap().envelope, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_invalidation_at_the_mark_is_not_late() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("retried-invalidation");
    let Ok(Invalidated::Fenced { fence: first }) = store.invalidate_at(&key, 7).await else {
        panic!()
    };
    // The first attempt ran but its reply was lost: the caller sends it again.
    let Ok(Invalidated::Fenced { fence: again }) = store.invalidate_at(&key, 7).await else {
        panic!("an equal version is re-applied, not reported late")
    };
    assert!(again > first);
    assert_eq!(store.invalidate_at(&key, 6).await, Ok(Invalidated::Late));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_fence_from_before_a_lost_counter_is_refused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    let key = key("read-fence-lost-counter");
    // A lease-less reader takes its fence while the key has no counter yet.
    let before = store.read(&key, None).await.unwrap();
    assert!(matches!(
        store.invalidate(&key).await,
        Ok(Invalidated::Fenced { .. })
    ));
    // The counter is lost (expiry, eviction, an operator's DEL).
    redis.cli(&["DEL", &key.fence()]);
    assert_eq!(
        store
            .publish(&key, publication(&before, before.fence, "old", None))
            .await,
        Ok(Published::RefusedByFence)
    );
    assert_eq!(store.read(&key, None).await.unwrap().envelope, None);
}

mod cluster;

/// A publish carries its envelope only when a replica's miss found the lease held and
/// waits for it; with nobody waiting its notice stays slim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_carries_its_value_only_to_a_lease_someone_waits_on() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (holder, other) = (store(&redis), store(&redis));
    subscribed(&holder).await;
    subscribed(&other).await;
    let key = key("carried");
    let _heard = other.listen(&key).await;
    let mut events = other.events();
    async fn published(events: &mut tokio::sync::broadcast::Receiver<StoreEvent>) -> Notice {
        loop {
            match within(PROMPTLY, next_event(events)).await {
                StoreEvent::Notice(notice) if notice.kind == NoticeKind::Published => {
                    return notice;
                }
                _ => {}
            }
        }
    }

    // Nobody waits: a slim notice.
    let lease = miss_lease();
    let read = holder.read(&key, lease).await.unwrap();
    assert!(matches!(read.lease, Lease::Granted { .. }));
    holder
        .publish(&key, held(&read, &lease, "alone", None))
        .await
        .unwrap();
    assert_eq!(published(&mut events).await.value, None);

    // Another replica's miss finds the lease held: the publish brings the value.
    holder.invalidate(&key).await.unwrap();
    let lease = miss_lease();
    let read = holder.read(&key, lease).await.unwrap();
    assert!(matches!(read.lease, Lease::Granted { .. }));
    let waiting = other.read(&key, miss_lease()).await.unwrap();
    assert!(
        matches!(waiting.lease, Lease::HeldBy(_)),
        "{:?}",
        waiting.lease
    );
    let publication = held(&read, &lease, "awaited", None);
    let envelope = publication.envelope.clone();
    holder.publish(&key, publication).await.unwrap();
    let notice = published(&mut events).await;
    assert_eq!(notice.value.as_deref(), Some(&envelope[..]));

    // A lease taken over keeps its mark: the replicas that waited on it still do.
    holder.invalidate(&key).await.unwrap();
    let read = holder.read(&key, miss_lease()).await.unwrap();
    assert!(matches!(read.lease, Lease::Granted { .. }));
    let waiting = other.read(&key, miss_lease()).await.unwrap();
    assert!(matches!(waiting.lease, Lease::HeldBy(_)));
    let forcing = asking(LeaseFor::Force);
    let read = other.read(&key, forcing).await.unwrap();
    assert!(
        matches!(
            read.lease,
            Lease::Granted {
                took_over: true,
                ..
            }
        ),
        "{:?}",
        read.lease
    );
    let publication = held(&read, &forcing, "taken over", None);
    let envelope = publication.envelope.clone();
    let mut own = other.events();
    other.publish(&key, publication).await.unwrap();
    let notice = published(&mut own).await;
    assert_eq!(notice.value.as_deref(), Some(&envelope[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_is_refused_after_an_invalidation_that_began_after_it() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis);
    for other_writer in [false, true] {
        let key = key(if other_writer { "raced" } else { "alone" });
        // The insert began, then its own invalidation raised the key's fence.
        let began = store.read(&key, None).await.unwrap().clock.read_ms() * 1024;
        let Ok(Invalidated::Fenced { fence: own }) = store.invalidate(&key).await else {
            panic!("the insert's own invalidation")
        };
        if other_writer {
            // Another writer's invalidation got in before the insert took the lease.
            store.invalidate(&key).await.unwrap();
        }
        let lease = asking(LeaseFor::Refresh);
        let read = store.read(&key, lease).await.unwrap();
        let publication = Publication {
            write_through: Some(WriteThrough { own, began }),
            ..held(&read, &lease, "inserted", None)
        };
        let expected = if other_writer {
            Published::RefusedByFence
        } else {
            Published::Stored
        };
        assert_eq!(store.publish(&key, publication).await, Ok(expected));
    }
}
