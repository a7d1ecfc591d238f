//! Tests of the flight registry: behaviour on `std`, then a shuttle model that explores
//! interleavings of a leader finishing, failing or being dropped while waiters join and
//! leave.

mod on_std {
    use super::super::{Flights, Join, Outcome};
    use std::sync::Arc;

    fn flights() -> Arc<Flights<&'static str, u32>> {
        Arc::new(Flights::new())
    }

    #[tokio::test]
    async fn the_first_caller_leads_and_later_ones_wait_for_its_outcome() {
        let flights = flights();
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!("first caller must lead")
        };
        let Join::Waiter(waiter) = flights.join(&"k") else {
            panic!("second caller must wait")
        };
        let mut stored = None;
        leader.settle(7, |k| stored = Some(k));
        assert_eq!(waiter.await, Outcome::Done(7));
        assert_eq!(stored, Some("k"));
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn an_answer_resting_on_a_read_is_shared_only_with_those_who_joined_before_it() {
        let flights = flights();
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!()
        };
        let early = flights.tick();
        let Join::Waiter(before) = flights.join(&"k") else {
            panic!()
        };
        // The read is sent: a caller joining from here on may have begun after an
        // invalidation it did not see.
        leader.rests_on(flights.tick());
        let late = flights.tick();
        let Join::Waiter(after) = flights.join(&"k") else {
            panic!()
        };
        leader.settle(7, |_| {});
        assert!(before.answers(early));
        assert!(!after.answers(late));
        assert_eq!(after.await, Outcome::Done(7));
        // A flight that read nothing answers every waiter.
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!()
        };
        let Join::Waiter(waiter) = flights.join(&"k") else {
            panic!()
        };
        let late = flights.tick();
        leader.settle(8, |_| {});
        assert!(waiter.answers(late));
    }

    #[tokio::test]
    async fn a_dropped_leader_wakes_waiters_to_take_over() {
        let flights = flights();
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!()
        };
        let Join::Waiter(waiter) = flights.join(&"k") else {
            panic!()
        };
        drop(leader);
        assert_eq!(waiter.await, Outcome::Abandoned);
        assert!(matches!(flights.join(&"k"), Join::Leader(_)));
    }

    #[tokio::test]
    async fn an_invalidated_flight_delivers_but_does_not_store() {
        let flights = flights();
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!()
        };
        let waiter = leader.waiter();
        flights.invalidate(&"k");
        let Join::Leader(newer) = flights.join(&"k") else {
            panic!("an invalidated key starts a new flight")
        };
        let mut stored = false;
        leader.settle(1, |_| stored = true);
        assert!(!stored);
        assert_eq!(waiter.await, Outcome::Done(1));
        // The newer flight started after the invalidation: it stores.
        assert_eq!(flights.len(), 1);
        let mut stored = false;
        newer.settle(2, |_| stored = true);
        assert!(stored);
        assert_eq!(flights.len(), 0);
    }

    #[test]
    fn an_uncoalesced_load_started_before_an_invalidation_does_not_store() {
        let flights = flights();
        let early = flights.start(&"k");
        let other_key = flights.start(&"j");
        assert_eq!(flights.len(), 2, "uncoalesced loads are running loads");
        flights.invalidate(&"k");
        let late = flights.start(&"k");
        let mut stored = Vec::new();
        early.settle(1, |k| stored.push((k, 1)));
        late.settle(2, |k| stored.push((k, 2)));
        other_key.settle(3, |k| stored.push((k, 3)));
        assert_eq!(stored, vec![("k", 2), ("j", 3)]);
        assert_eq!(flights.len(), 0);
    }

    #[test]
    fn invalidate_all_fences_every_running_load() {
        let flights = flights();
        let Join::Leader(coalesced) = flights.join(&"k") else {
            panic!()
        };
        let uncoalesced = flights.start(&"j");
        flights.invalidate_all();
        let mut stored = 0;
        coalesced.settle(1, |_| stored += 1);
        uncoalesced.settle(2, |_| stored += 1);
        assert_eq!(stored, 0);
        let after = flights.start(&"k");
        after.settle(3, |_| stored += 1);
        assert_eq!(stored, 1, "a load started after the epoch moved stores");
    }

    #[test]
    fn invalidating_a_key_nobody_loads_keeps_no_record() {
        let flights = flights();
        flights.invalidate(&"idle");
        let load = flights.start(&"idle");
        let mut stored = false;
        load.settle(1, |_| stored = true);
        assert!(stored, "the fence of a key with no load is not remembered");
    }
}

/// shuttle's locks, for the second compilation of `flight.rs` below.
mod sync {
    pub(crate) use shuttle::sync::{Arc, Mutex, MutexGuard};
}

// The second compilation is the point: the same source, on shuttle's locks.
#[expect(
    dead_code,
    clippy::duplicate_mod,
    reason = "the model drives only the part of the registry the schedules exercise"
)]
#[path = "registry.rs"]
mod modeled;

mod model {
    use super::modeled::{Flights, Join, Outcome};
    use super::sync::{Arc, Mutex};
    use shuttle::future::{block_on, spawn};
    use std::future::{poll_fn, Future};
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Poll;

    type Shared = Result<u32, &'static str>;

    /// How the first leader ends its flight.
    #[derive(Clone, Copy)]
    enum LeaderEnds {
        Finishes,
        Fails,
        IsDropped,
    }

    /// A caller that joins until it gets an outcome, leading when it has to. Leaders that
    /// take over always succeed, so every caller ends with `Done`.
    async fn caller(flights: Arc<Flights<u8, Shared>>, leaders: Arc<AtomicUsize>) -> Shared {
        loop {
            match flights.join(&1) {
                Join::Leader(leader) => {
                    leaders.fetch_add(1, Ordering::SeqCst);
                    shuttle::future::yield_now().await;
                    leader.settle(Ok(2), |_| {});
                    return Ok(2);
                }
                Join::Waiter(waiter) => match waiter.await {
                    Outcome::Done(shared) => return shared,
                    Outcome::Abandoned => continue,
                },
            }
        }
    }

    fn scenario(ends: LeaderEnds) {
        block_on(async move {
            let flights = Arc::new(Flights::<u8, Shared>::new());
            let leaders = Arc::new(AtomicUsize::new(0));
            let Join::Leader(first) = flights.join(&1) else {
                panic!("an empty registry makes a leader")
            };
            let mut callers = Vec::new();
            for _ in 0..2 {
                callers.push(spawn(caller(flights.clone(), leaders.clone())));
            }
            // A waiter that polls once, then leaves before the outcome.
            let leaving = {
                let flights = flights.clone();
                spawn(async move {
                    if let Join::Waiter(mut waiter) = flights.join(&1) {
                        let _ = poll_fn(|cx| Poll::Ready(Pin::new(&mut waiter).poll(cx))).await;
                    }
                })
            };
            let first_ends = spawn(async move {
                shuttle::future::yield_now().await;
                match ends {
                    LeaderEnds::Finishes => first.settle(Ok(1), |_| {}),
                    LeaderEnds::Fails => first.settle(Err("origin down"), |_| {}),
                    LeaderEnds::IsDropped => drop(first),
                }
            });
            first_ends.await.unwrap();
            leaving.await.unwrap();
            for c in callers {
                let got = c.await.unwrap();
                match ends {
                    // A caller either shared the first flight or led/joined a later one.
                    LeaderEnds::Finishes => assert!(got == Ok(1) || got == Ok(2), "{got:?}"),
                    LeaderEnds::Fails => {
                        assert!(got == Err("origin down") || got == Ok(2), "{got:?}")
                    }
                    LeaderEnds::IsDropped => assert_eq!(got, Ok(2)),
                }
            }
            assert_eq!(flights.len(), 0, "no entry outlives its flight");
            if let LeaderEnds::IsDropped = ends {
                assert!(leaders.load(Ordering::SeqCst) >= 1, "someone took over");
            }
        });
    }

    /// A load (coalesced or not) races `invalidate`, which fences and then empties the
    /// store: whatever the interleaving, the value computed before the invalidation is not
    /// in the store afterwards.
    fn invalidation_races(coalesced: bool) {
        block_on(async move {
            let flights = Arc::new(Flights::<u8, Shared>::new());
            let store = Arc::new(Mutex::new(None::<u32>));
            let leader = if coalesced {
                let Join::Leader(leader) = flights.join(&1) else {
                    panic!("an empty registry makes a leader")
                };
                leader
            } else {
                flights.start(&1)
            };
            let load = {
                let store = store.clone();
                spawn(async move {
                    shuttle::future::yield_now().await;
                    leader.settle(Ok(1), |_| *store.lock().unwrap() = Some(1));
                })
            };
            let invalidation = {
                let (flights, store) = (flights.clone(), store.clone());
                spawn(async move {
                    flights.invalidate(&1);
                    *store.lock().unwrap() = None;
                })
            };
            load.await.unwrap();
            invalidation.await.unwrap();
            assert_eq!(*store.lock().unwrap(), None, "the fenced value was stored");
            assert_eq!(flights.len(), 0, "no record outlives its loads");
        });
    }

    #[test]
    fn an_invalidation_racing_a_coalesced_load_never_leaves_its_value() {
        shuttle::check_random(|| invalidation_races(true), 3_000);
        shuttle::check_pct(|| invalidation_races(true), 3_000, 3);
    }

    #[test]
    fn an_invalidation_racing_an_uncoalesced_load_never_leaves_its_value() {
        shuttle::check_random(|| invalidation_races(false), 3_000);
        shuttle::check_pct(|| invalidation_races(false), 3_000, 3);
    }

    #[test]
    fn leader_finishes_while_waiters_join_and_leave() {
        shuttle::check_random(|| scenario(LeaderEnds::Finishes), 3_000);
        shuttle::check_pct(|| scenario(LeaderEnds::Finishes), 3_000, 3);
    }

    #[test]
    fn leader_fails_and_every_waiter_gets_the_error() {
        shuttle::check_random(|| scenario(LeaderEnds::Fails), 3_000);
        shuttle::check_pct(|| scenario(LeaderEnds::Fails), 3_000, 3);
    }

    #[test]
    fn leader_dropped_and_one_waiter_takes_over() {
        shuttle::check_random(|| scenario(LeaderEnds::IsDropped), 3_000);
        shuttle::check_pct(|| scenario(LeaderEnds::IsDropped), 3_000, 3);
    }
}
