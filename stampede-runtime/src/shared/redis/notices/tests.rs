use super::*;
use crate::hearing::HearingLease;

/// A hub named `replica`, its acknowledgements sent nowhere.
fn hub(replica: &str) -> NoticeHub {
    let (outbox, _) = mpsc::unbounded_channel();
    NoticeHub::new(
        replica.into(),
        "stampede:3:notices".into(),
        HearingLease::new(std::time::Duration::from_millis(500), true),
        outbox,
    )
}

#[test]
fn an_ask_is_answered_once_every_listener_handled_what_came_before_it() {
    let (outbox, mut owed) = mpsc::unbounded_channel();
    let hub = NoticeHub::new(
        "n1".into(),
        "stampede:3:notices".into(),
        HearingLease::new(std::time::Duration::from_millis(500), true),
        outbox,
    );
    hub.set_subscribed(true);
    let mut events = hub.events();
    let mut tags = hub.tag_events();
    let _ = events.try_recv();
    let _ = tags.try_recv();
    hub.deliver(b"i 17 n2 k:{a}");
    hub.deliver(b"k 42 n2");
    hub.deliver(b"k 43 n1");
    let Ok(StoreEvent::Notice(notice)) = events.try_recv() else {
        panic!("the notice first");
    };
    assert_eq!(notice.kind, NoticeKind::Invalidated);
    let Ok(StoreEvent::Passage(passage)) = events.try_recv() else {
        panic!("then the passage");
    };
    passage.taken();
    drop(passage);
    assert!(
        owed.try_recv().is_err(),
        "the tag listener has not taken it yet"
    );
    let Ok(StoreEvent::Passage(passage)) = tags.try_recv() else {
        panic!("the tag listener's passage");
    };
    passage.taken();
    drop(passage);
    let (channel, message) = owed.try_recv().expect("acknowledged");
    assert_eq!(
        (channel.as_str(), message.as_str()),
        ("stampede:3:notices:r:n2", "a 42 n1")
    );
    assert!(events.try_recv().is_err(), "its own ask needs no answer");
}

#[test]
fn a_renewal_holds_the_lease_once_every_listener_handled_what_came_before_it() {
    let hub = hub("n1");
    hub.set_subscribed(true);
    let mut events = hub.events();
    let _ = events.try_recv();
    let sent = hub
        .hearing_lease()
        .moment(crate::clock::StoreInstant::now());
    hub.deliver(format!("h {} {sent}", hub.hearing()).as_bytes());
    assert!(
        !hub.hearing_lease().holds(),
        "not before the listener took it"
    );
    let Ok(StoreEvent::Passage(passage)) = events.try_recv() else {
        panic!("a passage");
    };
    passage.taken();
    drop(passage);
    assert!(hub.hearing_lease().holds());
    hub.set_subscribed(false);
    assert!(!hub.hearing_lease().holds(), "lapsed with the subscription");
}

#[test]
fn acknowledgements_count_each_replica_once_for_their_own_write() {
    use crate::shared::acknowledgement::Hearer;
    let hub = hub("n1");
    let acks = hub.acks().register();
    let later = crate::clock::StoreInstant::now() + std::time::Duration::from_secs(60);
    let hearers = [
        Hearer {
            replica: "n2".into(),
            ends: later,
        },
        Hearer {
            replica: "n3".into(),
            ends: later,
        },
    ];
    hub.deliver(format!("a {} n2", acks.id()).as_bytes());
    hub.deliver(format!("a {} n2", acks.id()).as_bytes());
    hub.deliver(format!("a {} n3", acks.id() + 1).as_bytes());
    // Not paused: the waits run on the store's own clock, which a paused one would not
    // move (a simulation build reads Tokio's clock there).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let one = Hearer {
        replica: "n3".into(),
        ends: crate::clock::StoreInstant::now(),
    };
    assert!(
        !runtime.block_on(acks.wait(&[hearers[0].clone(), one])),
        "n3's lease ended unacknowledged"
    );
    hub.deliver(format!("a {} n3", acks.id()).as_bytes());
    assert!(runtime.block_on(acks.wait(&hearers)), "both acknowledged");
}

#[test]
fn notices_wake_only_their_keys_waiters_and_tell_their_own() {
    let hub = hub("n1");
    hub.set_subscribed(true);
    let mut a = hub.watch("k:{a}");
    let mut b = hub.watch("k:{b}");
    hub.deliver(b"p 17 n2 k:{a}");
    match a.try_recv().unwrap() {
        Wake::Notice(notice) => {
            assert_eq!(notice.kind, NoticeKind::Published);
            assert_eq!(
                (notice.key.as_str(), notice.fence, notice.own),
                ("k:{a}", 17, false)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(b.try_recv().is_err());
    hub.deliver(b"garbage");
    hub.deliver(b"i 18 n1 k:{b}");
    assert!(matches!(
        b.try_recv().unwrap(),
        Wake::Notice(Notice { own: true, .. })
    ));
    assert_eq!(hub.received(), 2);
}

#[test]
fn waiters_that_gave_up_are_pruned() {
    let hub = hub("n1");
    hub.set_subscribed(true);
    drop(hub.watch("gone"));
    let _kept = hub.watch("kept");
    hub.prune();
    let keys: Vec<String> = hub.waiters().keys().cloned().collect();
    assert_eq!(keys, ["kept"]);
}

#[test]
fn a_lost_subscription_wakes_every_waiter_and_new_ones_at_once() {
    let hub = hub("n1");
    assert_eq!(hub.hearing(), 0, "deaf until subscribed");
    hub.set_subscribed(true);
    assert_eq!(hub.hearing(), 1);
    let mut events = hub.events();
    let mut waiter = hub.watch("k");
    hub.set_subscribed(false);
    assert_eq!(hub.hearing(), 0);
    assert_eq!(waiter.try_recv().unwrap(), Wake::SubscriptionLost);
    assert_eq!(hub.watch("k").try_recv().unwrap(), Wake::SubscriptionLost);
    assert_eq!(events.try_recv().unwrap(), StoreEvent::SubscriptionLost);
    hub.set_subscribed(true);
    assert_eq!(events.try_recv().unwrap(), StoreEvent::Subscribed(2));
    assert_eq!(hub.hearing(), 2, "a new subscription, a higher epoch");
    hub.set_subscribed(true);
    assert!(events.try_recv().is_err(), "no change, no event");
    assert_eq!(hub.hearing(), 2);
}

#[test]
fn a_waiter_registering_while_the_subscription_drops_is_always_woken() {
    // Races `watch` against the drop many times; a waiter that saw the subscription
    // up but registered after the drop's wake-up went out would wait forever.
    const ROUNDS: usize = 20_000;
    let hub = hub("n1");
    let start = std::sync::Barrier::new(2);
    let mut stranded = 0;
    for _ in 0..ROUNDS {
        hub.set_subscribed(true);
        let waiters = std::thread::scope(|scope| {
            let watching = scope.spawn(|| {
                start.wait();
                let mut waiters = Vec::new();
                // Until a watch sees the drop: each one before may straddle it.
                loop {
                    let mut waiter = hub.watch("k");
                    if waiter.try_recv() == Ok(Wake::SubscriptionLost) {
                        return waiters;
                    }
                    waiters.push(waiter);
                }
            });
            start.wait();
            hub.set_subscribed(false);
            watching.join().unwrap()
        });
        stranded += waiters
            .into_iter()
            .filter_map(|mut waiter| waiter.try_recv().err())
            .count();
    }
    assert_eq!(stranded, 0, "waiters never woken in {ROUNDS} rounds");
}

#[test]
fn a_publish_notice_carries_its_envelope_bytes_as_they_are() {
    let hub = hub("n1");
    hub.set_subscribed(true);
    let mut waiter = hub.watch("k:{a b}");
    let mut payload = b"v 17 n2 7 k:{a b}".to_vec();
    let envelope = [0u8, 0xff, b' ', b'\n', 42];
    payload.extend_from_slice(&envelope);
    hub.deliver(&payload);
    let Wake::Notice(notice) = waiter.try_recv().unwrap() else {
        panic!("woken by the notice")
    };
    assert_eq!(
        (notice.kind, notice.key.as_str(), notice.fence, notice.own),
        (NoticeKind::Published, "k:{a b}", 17, false)
    );
    assert_eq!(notice.value.as_deref(), Some(&envelope[..]));
    // A key length past the payload, or not a number: not ours, ignored.
    hub.deliver(b"v 18 n2 99 k:{a b}");
    hub.deliver(b"v 18 n2 x k:{a b}");
    hub.deliver(b"v 18 n2");
    assert_eq!(hub.received(), 1);
    let mut own = hub.watch("k");
    hub.deliver(b"v 19 n1 1 k");
    let Wake::Notice(notice) = own.try_recv().unwrap() else {
        panic!()
    };
    assert!(notice.own && notice.value.as_deref() == Some(&[][..]));
}
