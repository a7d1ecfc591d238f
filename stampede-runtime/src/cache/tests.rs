use super::*;
use std::time::Duration;

#[tokio::test]
async fn source_version_marks_in_memory_are_bounded_by_the_capacity() {
    let policy = Policy::builder("marks")
        .fresh(Duration::from_secs(60))
        .capacity(100)
        .build()
        .unwrap();
    let runtime = Runtime::builder().build().unwrap();
    let cache: Cache<u64, u64> = Cache::builder(policy).runtime(&runtime).build();
    for key in 0..10_000 {
        cache.invalidate_at(&key, 7).await.unwrap();
    }
    let marks = cache.inner.marks.get().expect("marks were kept");
    marks.run_pending_tasks();
    assert!(
        marks.entry_count() <= 100,
        "{} marks for a cache of 100 entries",
        marks.entry_count()
    );
}

/// A cache whose values carry an `i64` version (a `BIGINT` column), in memory.
fn signed_versions(runtime: &Runtime) -> Cache<u64, (char, i64)> {
    let policy = Policy::builder("signed")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    Cache::builder(policy)
        .runtime(runtime)
        .source_version(|&(_, version): &(char, i64)| version)
        .build()
}

#[tokio::test]
async fn i64_versions_order_loads_and_invalidations_as_u64_ones_do() {
    let runtime = Runtime::builder().build().unwrap();
    let cache = signed_versions(&runtime);
    cache.load(1, || async { Ok(('a', 42)) }).await.unwrap();
    assert_eq!(
        cache.inner.memory.get(&1).and_then(|e| e.source_version),
        Some(42)
    );
    cache.invalidate_at(&1, 41_i64).await.unwrap();
    cache.invalidate_at(&1, 42_u64).await.unwrap();
    assert_eq!(cache.peek(&1), Some(('a', 42)), "late: kept");
    cache.invalidate_at(&1, 43_i64).await.unwrap();
    assert_eq!(cache.peek(&1), None);
    cache.load(1, || async { Ok(('b', 40)) }).await.unwrap();
    assert_eq!(
        cache.peek(&1),
        None,
        "read before the invalidation at 43: not stored"
    );
}

/// A negative version is no version: the value is stored without one, and an
/// invalidation at one drops the value as `invalidate` does and moves no mark.
#[tokio::test]
async fn a_negative_version_is_no_version() {
    let runtime = Runtime::builder().build().unwrap();
    let cache = signed_versions(&runtime);
    cache.load(1, || async { Ok(('n', -5)) }).await.unwrap();
    assert_eq!(cache.peek(&1), Some(('n', -5)), "stored");
    assert_eq!(
        cache.inner.memory.get(&1).and_then(|e| e.source_version),
        None
    );
    cache.invalidate_at(&1, 0_i64).await.unwrap();
    assert_eq!(
        cache.peek(&1),
        None,
        "a value without a version is older than any"
    );

    cache.load(1, || async { Ok(('c', 10)) }).await.unwrap();
    cache.invalidate_at(&1, -1_i64).await.unwrap();
    assert_eq!(cache.peek(&1), None, "dropped, as by `invalidate`");
    cache.load(1, || async { Ok(('c', 10)) }).await.unwrap();
    cache.invalidate_at(&1, 5_i64).await.unwrap();
    assert_eq!(
        cache.peek(&1),
        Some(('c', 10)),
        "late: the negative one moved no mark"
    );
}

/// A runtime on the shared `backend` and a cache named `name` on it, fresh for a minute.
#[cfg(feature = "redis")]
fn shared_cache(backend: crate::Backend, name: &str) -> (Runtime, Cache<u64, u64>) {
    let runtime = Runtime::builder().backend(backend).build().unwrap();
    let policy = Policy::builder(name)
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache = Cache::builder(policy).runtime(&runtime).build();
    (runtime, cache)
}

/// The word that the subscription came up reaches each tiered cache's listener on the
/// background threads, which other replicas of the process keep busy: it may come after the
/// cache made copies and began loads under that subscription. Those heard every notice
/// and stay; what began under an earlier subscription (or none) is dropped and detached.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_word_of_a_subscription_drops_only_what_began_before_it() {
    use crate::shared::store::{Notice, NoticeKind, StoreEvent};
    use tokio::sync::{broadcast, oneshot};
    async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("a wait in this test overran its deadline")
    }
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let (runtime, cache) = shared_cache(crate::Backend::tiered(redis.url()), "late-subscribed");
    cache.load(0, || async { Ok(0) }).await.unwrap();
    within(async {
        // Copies are served once the hearing lease holds too.
        while !runtime
            .backend_stats()
            .is_some_and(|stats| stats.subscribed && stats.hearing_lease_holds)
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    let tier = cache.inner.tier().unwrap().clone();
    let epoch = tier.hearing();
    assert!(epoch > 0, "hearing once subscribed");

    // This cache's listener, fed by hand. A marker copy, made before an event is sent,
    // gone once the notice sent after the event names it, tells when the event was
    // handled: events are handled in order.
    let (events, heard) = broadcast::channel(16);
    crate::shared::background::spawn(notices::follow(Arc::downgrade(&cache.inner), heard));
    let marker = |key: u64| {
        let cache = cache.clone();
        async move {
            cache
                .load(key, move || async move { Ok(key) })
                .await
                .unwrap();
            assert_eq!(cache.peek(&key), Some(key), "a marker copy");
        }
    };
    let handled = |key: u64| {
        let notice = Notice {
            kind: NoticeKind::Invalidated,
            key: tier.address(&key).unwrap().value().to_owned(),
            fence: u64::MAX >> 1,
            own: false,
            value: None,
        };
        events.send(StoreEvent::Notice(notice)).unwrap();
        let cache = cache.clone();
        async move {
            while cache.peek(&key).is_some() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    // A load begun under the subscription, running when word of it comes.
    let held = |key: u64| {
        let (release, released) = oneshot::channel::<()>();
        let (started, has_started) = oneshot::channel::<()>();
        let cache = cache.clone();
        let load = tokio::spawn(async move {
            cache
                .load(key, move || async move {
                    let _ = started.send(());
                    let _ = released.await;
                    Ok(key)
                })
                .await
        });
        (release, has_started, load)
    };

    cache.load(1, || async { Ok(1) }).await.unwrap();
    let (release, started, load) = held(2);
    within(started).await.unwrap();
    marker(1000).await;
    events.send(StoreEvent::Subscribed(epoch)).unwrap();
    within(handled(1000)).await;
    release.send(()).unwrap();
    assert_eq!(within(load).await.unwrap(), Ok(2));
    assert_eq!(cache.peek(&1), Some(1), "a copy made under the epoch stays");
    assert_eq!(cache.peek(&2), Some(2), "a load begun under it stores");

    // Word of a newer subscription: what began before it may have missed a notice.
    let (release, started, load) = held(3);
    within(started).await.unwrap();
    marker(1001).await;
    events.send(StoreEvent::Subscribed(epoch + 1)).unwrap();
    within(handled(1001)).await;
    release.send(()).unwrap();
    assert_eq!(within(load).await.unwrap(), Ok(3), "its callers get it");
    assert_eq!(cache.peek(&1), None, "a copy made before is dropped");
    assert_eq!(cache.peek(&2), None);
    assert_eq!(cache.peek(&3), None, "a load begun before is not stored");
}

/// A waiter answers from a publish notice only when the notice is no older than what its
/// own last read found: a notice of a value published before an invalidation the read
/// already saw can arrive late (a cluster carries notices over its bus, reads not).
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_notice_older_than_the_waiters_read_is_not_served() {
    use crate::shared::store::{Notice, NoticeKind};
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let (_runtime, cache) = shared_cache(crate::Backend::redis(redis.url()), "late-notice");
    // A load reads through the script, which gives the store's clock.
    cache.load(0, || async { Ok(0) }).await.unwrap();
    let tier = cache.inner.tier().unwrap().clone();
    let notice = |fence, own| Notice {
        kind: NoticeKind::Published,
        key: tier.address(&1).unwrap().value().to_owned(),
        fence,
        own,
        value: Some(Arc::from(&b"an envelope"[..])),
    };
    assert!(
        tier.read_in_notice(&notice(7, false), 7).is_some(),
        "the lease's own fence"
    );
    assert!(
        tier.read_in_notice(&notice(8, false), 7).is_some(),
        "a newer one"
    );
    assert!(
        tier.read_in_notice(&notice(6, false), 7).is_none(),
        "older than the read"
    );
    assert!(
        tier.read_in_notice(&notice(7, true), 7).is_none(),
        "this replica's own"
    );
    let slim = Notice {
        value: None,
        ..notice(7, false)
    };
    assert!(
        tier.read_in_notice(&slim, 7).is_none(),
        "nothing rode along"
    );
}

/// A copy is remembered as heard only while this replica hears its key's bucket under the
/// copy's epoch: a copy made otherwise (a demoted copy whose bucket went idle meanwhile)
/// relies on no notice, and `copied` says so.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_heard_only_while_its_bucket_is() {
    let Some(redis) = testkit::RedisServer::start() else {
        return;
    };
    let (_runtime, cache) = shared_cache(crate::Backend::tiered(redis.url()), "copy-heard");
    cache.load(0, || async { Ok(0) }).await.unwrap();
    let tier = cache.inner.tier().unwrap().clone();
    tokio::time::timeout(Duration::from_secs(10), async {
        while tier.hearing() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("subscribed");
    let epoch = tier.hearing();
    // A key no load of this replica has used: its bucket is not subscribed.
    let (key, entry) = (0..)
        .map(|key: u64| (key + 1_000, tier.address(&(key + 1_000)).unwrap()))
        .find(|(_, entry)| !tier.hears(entry))
        .unwrap();
    assert!(!tier.copied(&entry, &key, 5, 1, epoch), "not heard");
    let listening = tier.replica.store().listen(&entry).await;
    assert_eq!(listening.epoch(), epoch);
    assert!(tier.copied(&entry, &key, 5, 2, epoch), "heard");
    assert!(
        !tier.copied(&entry, &key, 5, 3, epoch + 1),
        "another epoch's"
    );
}
