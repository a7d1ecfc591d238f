//! Tests of the flight registry: behaviour on `std`, then a shuttle model that explores
//! interleavings of a leader finishing, failing or being dropped while waiters join and
//! leave.

mod on_std {
    use crate::flight::{Flights, Join, Outcome};
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
    async fn a_forgotten_flight_delivers_but_does_not_store() {
        let flights = flights();
        let Join::Leader(leader) = flights.join(&"k") else {
            panic!()
        };
        let waiter = leader.waiter();
        flights.forget(&"k");
        let Join::Leader(newer) = flights.join(&"k") else {
            panic!("forgotten key starts a new flight")
        };
        let mut stored = false;
        leader.settle(1, |_| stored = true);
        assert!(!stored);
        assert_eq!(waiter.await, Outcome::Done(1));
        // The newer flight is untouched by the older one settling.
        assert_eq!(flights.len(), 1);
        drop(newer);
        assert_eq!(flights.len(), 0);
    }
}

/// shuttle's locks, for the second compilation of `flight.rs` below.
mod sync {
    pub(crate) use shuttle::sync::{Arc, Mutex, MutexGuard};
}

// The second compilation is the point: the same source, on shuttle's locks.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "flight.rs"]
mod modeled;

mod model {
    use super::modeled::{Flights, Join, Outcome};
    use super::sync::Arc;
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
