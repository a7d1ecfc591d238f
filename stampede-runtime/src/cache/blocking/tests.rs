use crate::{Cache, Policy};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn threads_that_miss_one_key_together_share_one_origin_call() {
    const THREADS: usize = 8;
    let policy = Policy::builder("blocking")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, usize> = Cache::new(policy);
    let calls = AtomicUsize::new(0);
    let start = Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                start.wait();
                let answer = cache.load_blocking(1, |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    // Held until every other thread waits on this load.
                    let until = Instant::now() + DEADLINE;
                    while cache.stats().coalesced < (THREADS - 1) as u64 {
                        assert!(Instant::now() < until, "the other threads never joined");
                        std::thread::yield_now();
                    }
                    Ok(7)
                });
                assert_eq!(answer, Ok(7));
            });
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().origin_calls, 1);
}

#[test]
fn a_waiting_thread_takes_over_when_the_leading_thread_panics() {
    let policy = Policy::builder("blocking-takeover")
        .fresh(Duration::from_secs(60))
        .build()
        .unwrap();
    let cache: Cache<u32, usize> = Cache::new(policy);
    let calls = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| {
            cache.load_blocking(1, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                let until = Instant::now() + DEADLINE;
                while cache.stats().coalesced < 1 {
                    assert!(Instant::now() < until, "the waiter never joined");
                    std::thread::yield_now();
                }
                panic!("the origin failed");
            })
        });
        let waiter = scope.spawn(|| {
            let until = Instant::now() + DEADLINE;
            while calls.load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < until, "the leader never started");
                std::thread::yield_now();
            }
            cache.load_blocking(1, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(9)
            })
        });
        assert!(
            leader.join().is_err(),
            "the panic reaches the leading thread"
        );
        assert_eq!(waiter.join().unwrap(), Ok(9), "the waiter took over");
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
