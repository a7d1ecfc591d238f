//! The Redis backend against a local three-master Redis Cluster each test starts.
use super::super::*;
use super::{
    asking, held, miss_lease, publication, subscribed, value_of, within, PROMPTLY,
    RESPONSE_TIMEOUT, SLACK,
};
use crate::shared::store::{
    BreakerState, Invalidated, Lease, LeaseFor, Notice, NoticeKind, Published, Read, SharedStore,
    StoreEvent, Wake,
};
use redis::PushKind;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use testkit::RedisCluster;

const MASTERS: usize = 3;

fn config(cluster: &RedisCluster) -> RedisConfig {
    RedisConfig {
        response_timeout: RESPONSE_TIMEOUT,
        breaker_cooldown: Duration::from_millis(100),
        heartbeat: Duration::from_millis(50),
        ..RedisConfig::cluster(cluster.node_urls())
    }
}

fn store(cluster: &RedisCluster) -> RedisStore {
    RedisStore::connect(config(cluster)).unwrap()
}

fn key(name: &str, id: u64) -> EntryKey {
    EntryKey::new("stampede", name, 1, &id).unwrap()
}

/// `per_master` keys named `name` on each master, with the master that owns them.
fn keys_on_every_master(
    cluster: &RedisCluster,
    name: &str,
    per_master: usize,
) -> Vec<(EntryKey, usize)> {
    let mut found: Vec<(EntryKey, usize)> = Vec::new();
    let mut counts = [0; MASTERS];
    for id in 0.. {
        if counts.iter().all(|&n| n == per_master) {
            break;
        }
        let key = key(name, id);
        let owner = cluster.owner(cluster::slot(key.value().as_bytes()));
        if counts[owner] < per_master {
            counts[owner] += 1;
            found.push((key, owner));
        }
    }
    found
}

/// Waits until the store's slot map names every master, so each has its own breaker.
async fn mapped(store: &RedisStore) {
    within(PROMPTLY, async {
        while store.client.shards.masters().len() < MASTERS {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Takes the lease on `key` and publishes `value` under it.
async fn put(store: &RedisStore, key: &EntryKey, value: &str) {
    let lease = asking(LeaseFor::Refresh);
    let read = store.read(key, lease).await.unwrap();
    let Lease::Granted { .. } = read.lease else {
        panic!("{:?}", read.lease)
    };
    let stored = store.publish(key, held(&read, &lease, value, None)).await;
    assert_eq!(stored, Ok(Published::Stored));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_names_keys_of_one_slot_and_a_lost_script_reloads_on_its_keys_master() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let store = store(&cluster);
    let keys = keys_on_every_master(&cluster, "one-slot", 2);
    for (key, owner) in &keys {
        // Every key a script names (value, lease, fence): one slot, by Redis's own count
        // and by ours.
        let named = [key.value().to_owned(), key.lease(), key.fence()];
        let slots: Vec<String> = named
            .iter()
            .map(|name| cluster.cli(*owner, &["CLUSTER", "KEYSLOT", name]))
            .collect();
        assert!(
            slots.iter().all(|slot| *slot == slots[0]),
            "{named:?}: {slots:?}"
        );
        assert_eq!(slots[0], cluster::slot(key.value().as_bytes()).to_string());
    }

    // A script naming keys of two slots would be refused with CROSSSLOT: all four run.
    for (key, _) in &keys {
        put(&store, key, "before").await;
    }
    for i in 0..MASTERS {
        assert_eq!(cluster.cli(i, &["SCRIPT", "FLUSH"]), "OK");
    }
    // The script goes back to the key's master only.
    let (first, owner) = &keys[0];
    // Without a recent server clock a read runs the script (a fresh value would
    // otherwise be read with a plain MGET).
    *store.client.clock.lock().unwrap() = None;
    store.read(first, None).await.unwrap();
    let hash = store.client.scripts.read.hash();
    for i in 0..MASTERS {
        let loaded = cluster.cli(i, &["SCRIPT", "EXISTS", hash]);
        assert_eq!(loaded, if i == *owner { "1" } else { "0" }, "master {i}");
    }
    for (key, owner) in &keys {
        let read = store.read(key, None).await.unwrap();
        assert_eq!(value_of(&read).as_deref(), Some("before"), "master {owner}");
        put(&store, key, "after").await;
        let read = store.read(key, miss_lease()).await.unwrap();
        assert_eq!(value_of(&read).as_deref(), Some("after"));
        assert!(matches!(
            store.invalidate(key).await,
            Ok(Invalidated::Fenced { .. })
        ));
        let lease = miss_lease();
        let read = store.read(key, lease).await.unwrap();
        let Lease::Granted { .. } = read.lease else {
            panic!("{:?}", read.lease)
        };
        assert_eq!(store.release(key, lease.unwrap().token).await, Ok(true));
    }
    assert_eq!(store.stats().errors, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_get_one_lease_per_key_on_every_shard_and_all_waiters_wake() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let replicas: Vec<Arc<RedisStore>> = (0..8).map(|_| Arc::new(store(&cluster))).collect();
    for replica in &replicas {
        subscribed(replica).await;
    }
    let keys = keys_on_every_master(&cluster, "fleet", 4);

    // Every replica asks for every key at once.
    let reads: Vec<_> = keys
        .iter()
        .flat_map(|(key, _)| replicas.iter().enumerate().map(move |r| (key.clone(), r)))
        .map(|(key, (r, replica))| {
            let replica = Arc::clone(replica);
            tokio::spawn(async move {
                let read = replica.read(&key, miss_lease()).await.unwrap();
                (key, r, read)
            })
        })
        .collect();
    let mut owners: HashMap<String, (usize, Read)> = HashMap::new();
    let mut waiters: HashMap<String, Vec<usize>> = HashMap::new();
    for read in reads {
        let (key, r, read) = within(PROMPTLY, read).await.unwrap();
        match read.lease {
            Lease::Granted { .. } => {
                let earlier = owners.insert(key.value().to_owned(), (r, read));
                assert!(earlier.is_none(), "two leases for {}", key.value());
            }
            Lease::HeldBy { .. } => waiters.entry(key.value().to_owned()).or_default().push(r),
            Lease::NotTaken => panic!("nothing servable was stored"),
        }
    }
    assert_eq!(owners.len(), keys.len(), "one lease per key");
    assert!(waiters.values().all(|w| w.len() == replicas.len() - 1));

    // Every waiter watches, then every owner publishes.
    let (mut watches, mut heard) = (Vec::new(), Vec::new());
    for (key, _) in &keys {
        for &r in &waiters[key.value()] {
            heard.push(replicas[r].listen(key).await);
            watches.push((key.clone(), r, replicas[r].watch(key)));
        }
    }
    for (key, _) in &keys {
        let (r, read) = &owners[key.value()];
        let Lease::Granted { fence, .. } = read.lease else {
            unreachable!()
        };
        let value = format!("value of {}", key.value());
        let stored = replicas[*r]
            .publish(key, publication(read, fence, &value, None))
            .await;
        assert_eq!(stored, Ok(Published::Stored));
    }
    let mut woken = 0;
    for (key, r, watch) in watches {
        let Wake::Notice(notice) = within(PROMPTLY, watch).await.unwrap() else {
            panic!("replica {r} lost its subscription")
        };
        assert_eq!(
            (notice.kind, notice.key.as_str()),
            (NoticeKind::Published, key.value())
        );
        let read = replicas[r].read(&key, miss_lease()).await.unwrap();
        assert_eq!(value_of(&read), Some(format!("value of {}", key.value())));
        assert_eq!(read.lease, Lease::NotTaken);
        woken += 1;
    }
    assert_eq!(woken, keys.len() * (replicas.len() - 1));
}

/// `count` keys (ids from `first`) whose value keys share one slot with `key(name, 0)`.
fn keys_in_one_slot(name: &str, count: usize) -> Vec<EntryKey> {
    let target = cluster::slot(key(name, 0).value().as_bytes());
    (0..)
        .map(|id| key(name, id))
        .filter(|key| cluster::slot(key.value().as_bytes()) == target)
        .take(count)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_traffic_never_serves_a_wrong_or_older_value() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let cluster = Arc::new(cluster);
    let (writer, reader) = (Arc::new(store(&cluster)), Arc::new(store(&cluster)));
    let keys = keys_in_one_slot("migrating", 4);
    let slot = cluster::slot(keys[0].value().as_bytes());
    let from = cluster.owner(slot);
    // The value published last per key (its sequence number), once the publish returned.
    let stored: Arc<Vec<AtomicU64>> = Arc::new(keys.iter().map(|_| AtomicU64::new(0)).collect());
    for (i, key) in keys.iter().enumerate() {
        put(&writer, key, &format!("{i}:1")).await;
        stored[i].store(1, Ordering::SeqCst);
    }
    let migrated = Arc::new(AtomicBool::new(false));
    let bound = RESPONSE_TIMEOUT + SLACK;

    let writing = {
        let (writer, keys, stored, migrated) = (
            Arc::clone(&writer),
            keys.clone(),
            Arc::clone(&stored),
            Arc::clone(&migrated),
        );
        tokio::spawn(async move {
            let (mut calls, mut after) = (0u64, 0u64);
            for n in 2.. {
                let done = migrated.load(Ordering::SeqCst);
                for (i, key) in keys.iter().enumerate() {
                    let started = Instant::now();
                    let lease = asking(LeaseFor::Refresh);
                    let read = writer.read(key, lease).await;
                    calls += 1;
                    assert!(started.elapsed() <= bound, "{:?}", started.elapsed());
                    let Ok(read) = read else { continue };
                    let Lease::Granted { .. } = read.lease else {
                        continue;
                    };
                    let started = Instant::now();
                    let value = format!("{i}:{n}");
                    let outcome = writer.publish(key, held(&read, &lease, &value, None)).await;
                    assert!(started.elapsed() <= bound, "{:?}", started.elapsed());
                    if outcome == Ok(Published::Stored) {
                        stored[i].store(n, Ordering::SeqCst);
                        after += u64::from(done);
                    }
                }
                if done && after >= 4 * keys.len() as u64 {
                    return calls;
                }
            }
            unreachable!()
        })
    };
    let reading = {
        let (reader, keys, stored, migrated) = (
            Arc::clone(&reader),
            keys.clone(),
            Arc::clone(&stored),
            Arc::clone(&migrated),
        );
        tokio::spawn(async move {
            let (mut calls, mut after) = (0u64, 0u64);
            loop {
                let done = migrated.load(Ordering::SeqCst);
                for (i, key) in keys.iter().enumerate() {
                    let floor = stored[i].load(Ordering::SeqCst);
                    let started = Instant::now();
                    let read = reader.read(key, None).await;
                    calls += 1;
                    assert!(started.elapsed() <= bound, "{:?}", started.elapsed());
                    let Ok(read) = read else { continue };
                    let value = value_of(&read).expect("a published value is never lost");
                    let (of, n) = value.split_once(':').unwrap();
                    assert_eq!(of, i.to_string(), "another key's value");
                    let n: u64 = n.parse().unwrap();
                    assert!(n >= floor, "{n} is older than {floor}, published before");
                    after += u64::from(done);
                }
                if done && after >= 4 * keys.len() as u64 {
                    return calls;
                }
            }
        })
    };

    let to = (from + 1) % MASTERS;
    let moving = Arc::clone(&cluster);
    within(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || moving.migrate_slot(slot, from, to)),
    )
    .await
    .unwrap();
    migrated.store(true, Ordering::SeqCst);
    let (writes, reads) = (
        within(Duration::from_secs(20), writing).await.unwrap(),
        within(Duration::from_secs(20), reading).await.unwrap(),
    );
    assert!(writes > 0 && reads > 0);
    assert_eq!(cluster.owner(slot), to);
    for (i, key) in keys.iter().enumerate() {
        let read = reader.read(key, None).await.unwrap();
        let n = stored[i].load(Ordering::SeqCst);
        assert_eq!(value_of(&read), Some(format!("{i}:{n}")));
    }
    assert_eq!(writer.stats().breaker, BreakerState::Closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_reaches_a_subscriber_after_a_slot_migration() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let (a, b) = (store(&cluster), store(&cluster));
    subscribed(&a).await;
    subscribed(&b).await;
    let key = key("moved-notice", 0);
    let slot = cluster::slot(key.value().as_bytes());
    let from = cluster.owner(slot);

    let _heard = b.listen(&key).await;

    let waiter = b.watch(&key);
    put(&a, &key, "before").await;
    assert!(matches!(
        within(PROMPTLY, waiter).await.unwrap(),
        Wake::Notice(Notice {
            kind: NoticeKind::Published,
            ..
        })
    ));

    cluster.migrate_slot(slot, from, (from + 1) % MASTERS);
    let _heard = b.listen(&key).await;
    let waiter = b.watch(&key);
    put(&a, &key, "after").await;
    let Wake::Notice(notice) = within(PROMPTLY, waiter).await.unwrap() else {
        panic!("the subscription was lost")
    };
    assert_eq!(
        (notice.kind, notice.key.as_str()),
        (NoticeKind::Published, key.value())
    );
    let read = b.read(&key, None).await.unwrap();
    assert_eq!(value_of(&read).as_deref(), Some("after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_fails_only_its_keys_fast_and_everything_returns_after_its_restart() {
    let Some(mut cluster) = RedisCluster::start() else {
        return;
    };
    let (store, other) = (store(&cluster), store(&cluster));
    subscribed(&store).await;
    subscribed(&other).await;
    mapped(&store).await;
    let keys = keys_on_every_master(&cluster, "dead-master", 2);
    for (key, _) in &keys {
        put(&store, key, "kept").await;
    }
    // Subscribers listen on the first node: killing it also drops every subscription.
    let dead = 0;
    let mut events = store.events();
    cluster.kill(dead);

    assert_eq!(
        within(PROMPTLY, super::next_event(&mut events)).await,
        StoreEvent::SubscriptionLost
    );
    let bound = RESPONSE_TIMEOUT + SLACK;
    for round in 0..=DEFAULT_BREAKER_FAILURES {
        for (key, owner) in &keys {
            let started = Instant::now();
            let read = store.read(key, None).await;
            assert!(started.elapsed() <= bound, "{:?}", started.elapsed());
            if *owner == dead {
                assert!(read.is_err(), "round {round}: {read:?}");
            } else {
                let read = read.unwrap();
                assert_eq!(value_of(&read).as_deref(), Some("kept"));
            }
        }
    }
    // Scripts lost on a live master load again there, whatever the dead one.
    for live in (0..MASTERS).filter(|&i| i != dead) {
        assert_eq!(cluster.cli(live, &["SCRIPT", "FLUSH"]), "OK");
    }
    for (key, owner) in keys.iter().filter(|(_, owner)| *owner != dead) {
        let read = store.read(key, None).await;
        assert_eq!(
            value_of(&read.unwrap()).as_deref(),
            Some("kept"),
            "master {owner}"
        );
    }
    // Only the dead master's breaker opened (it stays open or probing while the master is
    // down): its keys fail without waiting on it, nobody else's do.
    let (dead_key, _) = keys.iter().find(|(_, owner)| *owner == dead).unwrap();
    for (key, owner) in &keys {
        let state = store.client.shards.for_key(key.value()).1.state();
        assert_eq!(
            state == BreakerState::Closed,
            *owner != dead,
            "master {owner}"
        );
    }
    assert_eq!(store.stats().breaker_opened, 1);

    // The subscription moved to a live node: notices flow while the master is down.
    assert!(matches!(
        within(PROMPTLY, super::next_event(&mut events)).await,
        StoreEvent::Subscribed(_)
    ));
    let (live_key, _) = keys.iter().find(|(_, owner)| *owner != dead).unwrap();
    subscribed(&other).await;
    let _heard = store.listen(live_key).await;
    let waiter = store.watch(live_key);
    put(&other, live_key, "while down").await;
    assert!(matches!(
        within(PROMPTLY, waiter).await.unwrap(),
        Wake::Notice(_)
    ));

    tokio::task::block_in_place(|| cluster.restart(dead));
    within(PROMPTLY, async {
        while store.read(dead_key, None).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for (key, owner) in &keys {
        let read = store.read(key, None).await.unwrap();
        // A restarted master without persistence comes back empty.
        let expected = if *owner == dead { None } else { Some("kept") };
        if key.value() != live_key.value() {
            assert_eq!(value_of(&read).as_deref(), expected);
        }
        put(&store, key, "again").await;
    }
    subscribed(&other).await;
    let _heard = other.listen(dead_key).await;
    let waiter = other.watch(dead_key);
    put(&store, dead_key, "back").await;
    assert!(matches!(
        within(PROMPTLY, waiter).await.unwrap(),
        Wake::Notice(_)
    ));
    assert_eq!(store.stats().breaker, BreakerState::Closed);
}

fn percentiles(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    format!("p50 {:.2?}, p99 {:.2?}", at(0.50), at(0.99))
}

/// Plain PUBLISH (what the store sends) against sharded SPUBLISH, on the same cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: cargo test -p stampede-runtime --lib wake_up_latency -- --ignored --nocapture"]
async fn wake_up_latency_of_plain_and_sharded_notices() {
    use redis::cluster::ClusterClientBuilder;
    const SAMPLES: u64 = 300;
    let Some(cluster) = RedisCluster::start() else {
        return;
    };

    // The store end to end: publish on one replica, its waiter woken on another.
    let (a, b) = (store(&cluster), store(&cluster));
    subscribed(&a).await;
    subscribed(&b).await;
    let mut store_wakes = Vec::new();
    for id in 0..SAMPLES {
        let key = key("latency", id);
        let read = a.read(&key, miss_lease()).await.unwrap();
        let Lease::Granted { fence, .. } = read.lease else {
            panic!()
        };
        let _heard = b.listen(&key).await;
        let waiter = b.watch(&key);
        let started = Instant::now();
        a.publish(&key, publication(&read, fence, "v", None))
            .await
            .unwrap();
        assert!(matches!(
            within(PROMPTLY, waiter).await,
            Ok(Wake::Notice(_))
        ));
        store_wakes.push(started.elapsed());
    }

    // The bare commands: PUBLISH to one node-level subscriber; SPUBLISH to a cluster
    // client that SSUBSCRIBEs the key's channel first (a channel lives in one slot, so a
    // waiter must subscribe per key, or per slot, on the shard that owns it).
    let client = ClusterClientBuilder::new(cluster.node_urls())
        .build()
        .unwrap();
    let mut publisher = client.get_async_connection().await.unwrap();
    let (push_sender, mut pushes) = mpsc::unbounded_channel();
    let mut plain_subscriber = connection::subscriber(
        redis::Client::open(cluster.node_urls()[0].as_str()).unwrap(),
        Patience {
            response_timeout: PROMPTLY,
            connect_timeout: PROMPTLY,
        },
        push_sender,
    )
    .unwrap();
    plain_subscriber.subscribe("plain").await.unwrap();
    let (push_sender, mut sharded_pushes) = mpsc::unbounded_channel();
    let mut sharded_subscriber = ClusterClientBuilder::new(cluster.node_urls())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(push_sender)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let (mut plain, mut sharded, mut ssubscribes) = (Vec::new(), Vec::new(), Vec::new());
    for id in 0..SAMPLES {
        let started = Instant::now();
        let _: u64 = redis::cmd("PUBLISH")
            .arg("plain")
            .arg(id)
            .query_async(&mut publisher)
            .await
            .unwrap();
        within(PROMPTLY, async {
            while pushes.recv().await.unwrap().kind != PushKind::Message {}
        })
        .await;
        plain.push(started.elapsed());

        let channel = format!("sharded:{{latency:{id}}}");
        let started = Instant::now();
        sharded_subscriber.ssubscribe(&channel).await.unwrap();
        ssubscribes.push(started.elapsed());
        let started = Instant::now();
        let _: u64 = redis::cmd("SPUBLISH")
            .arg(&channel)
            .arg(id)
            .query_async(&mut publisher)
            .await
            .unwrap();
        within(PROMPTLY, async {
            while sharded_pushes.recv().await.unwrap().kind != PushKind::SMessage {}
        })
        .await;
        sharded.push(started.elapsed());
    }
    println!(
        "store publish -> waiter on another replica woken: {}",
        percentiles(store_wakes)
    );
    println!(
        "PUBLISH -> node subscriber:                      {}",
        percentiles(plain)
    );
    println!(
        "SPUBLISH -> cluster SSUBSCRIBEr:                 {}",
        percentiles(sharded)
    );
    println!(
        "SSUBSCRIBE of the key's channel (per wait):      {}",
        percentiles(ssubscribes)
    );
}
