use super::*;

const NORMAL: Priority = Priority::Normal;

/// A load asking `admission` for a permit in a task of its own: whether it got one (given
/// back at once).
fn in_queue(
    admission: &Arc<Admission>,
    priority: Priority,
    group: Option<u64>,
) -> tokio::task::JoinHandle<bool> {
    let admission = admission.clone();
    tokio::spawn(async move { admission.enter(priority, group, None).await.is_ok() })
}

#[tokio::test(start_paused = true)]
async fn a_full_semaphore_sheds_after_the_queue_timeout_and_admits_when_a_permit_frees() {
    let admission = Admission::new("db".into(), 2, Duration::from_millis(100));
    let first = admission
        .enter(NORMAL, None, None)
        .await
        .expect("a free permit");
    let _second = admission
        .enter(NORMAL, None, None)
        .await
        .expect("a free permit");
    assert_eq!(
        admission.permits.available_permits(),
        0,
        "both permits held"
    );
    let started = tokio::time::Instant::now();
    assert_eq!(
        admission.enter(NORMAL, None, None).await.err(),
        Some(Shed::Queued)
    );
    assert_eq!(started.elapsed(), Duration::from_millis(100));
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(40)).await;
        drop(first);
    });
    let started = tokio::time::Instant::now();
    assert!(
        admission.enter(NORMAL, None, None).await.is_ok(),
        "admitted once one frees"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(40));
    release.await.unwrap();
}

fn with_shares(limit: usize, reserved_high: usize, low_queue: Option<usize>) -> Arc<Admission> {
    let shares = Shares {
        reserved_high,
        low_queue,
        per_group: None,
    };
    Arc::new(Admission::with_shares(
        "db".into(),
        limit,
        Duration::from_millis(100),
        shares,
    ))
}

#[tokio::test(start_paused = true)]
async fn reserved_permits_go_to_high_priority_loads_only() {
    let admission = with_shares(3, 1, None);
    let _a = admission
        .enter(Priority::Low, None, None)
        .await
        .expect("a shared permit");
    let _b = admission
        .enter(NORMAL, None, None)
        .await
        .expect("a shared permit");
    // The shared permits are gone; the reserved one is left.
    assert_eq!(
        admission.enter(NORMAL, None, None).await.err(),
        Some(Shed::Queued),
        "a normal load does not take the reserved permit"
    );
    assert_eq!(
        admission.enter(Priority::Low, None, None).await.err(),
        Some(Shed::Queued)
    );
    let high = admission.enter(Priority::High, None, None).await;
    assert!(
        high.is_ok(),
        "a high-priority load takes the reserved permit at once"
    );
    assert_eq!(
        admission.enter(Priority::High, None, None).await.err(),
        Some(Shed::Queued),
        "and the limit still holds for it"
    );
}

/// A high-priority load queued while the shared and the reserved permit are both taken,
/// then `reserved_first` or the shared one freed: it is admitted by whichever it was, and
/// the other kind stays as it was.
async fn a_queued_high_priority_load_takes_the_freed(reserved_first: bool) {
    let admission = with_shares(2, 1, None);
    let shared_permit = admission
        .enter(NORMAL, None, None)
        .await
        .expect("the shared permit");
    let reserved_permit = admission
        .enter(Priority::High, None, None)
        .await
        .expect("the reserved one");
    let waiting = in_queue(&admission, Priority::High, None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (freed, kept) = match reserved_first {
        true => (reserved_permit, shared_permit),
        false => (shared_permit, reserved_permit),
    };
    drop(freed);
    assert!(waiting.await.unwrap(), "admitted by the freed permit");
    let reserved = admission.reserved.as_ref().unwrap();
    // The admitted load's permit went back when its task ended; the kept one is held.
    let free = (
        admission.permits.available_permits(),
        reserved.available_permits(),
    );
    assert_eq!(free, if reserved_first { (0, 1) } else { (1, 0) });
    drop(kept);
    let free = (
        admission.permits.available_permits(),
        reserved.available_permits(),
    );
    assert_eq!(free, (1, 1), "every permit back");
}

#[tokio::test(start_paused = true)]
async fn a_queued_high_priority_load_takes_the_reserved_permit_if_it_frees_first() {
    a_queued_high_priority_load_takes_the_freed(true).await;
}

#[tokio::test(start_paused = true)]
async fn a_queued_high_priority_load_takes_the_shared_permit_if_it_frees_first() {
    a_queued_high_priority_load_takes_the_freed(false).await;
}

/// A high-priority load queued on both semaphores that gives up (its queue timeout, or
/// its caller dropped it) leaves both as they were and is no longer counted as queued.
#[tokio::test(start_paused = true)]
async fn a_queued_high_priority_load_that_gives_up_holds_nothing() {
    let admission = with_shares(2, 1, None);
    let shared_permit = admission
        .enter(NORMAL, None, None)
        .await
        .expect("the shared permit");
    let reserved_permit = admission
        .enter(Priority::High, None, None)
        .await
        .expect("the reserved one");
    // Timed out in the queue.
    assert_eq!(
        admission.enter(Priority::High, None, None).await.err(),
        Some(Shed::Queued)
    );
    assert_eq!(admission.queued.load(Ordering::Relaxed), 0);
    // Dropped while queued.
    let dropped = in_queue(&admission, Priority::High, None);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(admission.queued.load(Ordering::Relaxed), 1);
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(admission.queued.load(Ordering::Relaxed), 0);
    drop((shared_permit, reserved_permit));
    let reserved = admission.reserved.as_ref().unwrap();
    assert_eq!(
        (
            admission.permits.available_permits(),
            reserved.available_permits()
        ),
        (1, 1),
        "every permit back"
    );
}

#[tokio::test(start_paused = true)]
async fn low_priority_loads_are_shed_at_once_when_the_queue_is_at_low_queue() {
    let admission = with_shares(1, 0, Some(2));
    let held = admission
        .enter(NORMAL, None, None)
        .await
        .expect("the one permit");
    // Two loads queue (a low-priority one among them: the queue was shorter).
    let mut queued = Vec::new();
    for priority in [Priority::Low, NORMAL] {
        queued.push(in_queue(&admission, priority, None));
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(admission.queued.load(Ordering::Relaxed), 2);
    let started = tokio::time::Instant::now();
    assert_eq!(
        admission.enter(Priority::Low, None, None).await.err(),
        Some(Shed::Early),
        "shed without queueing"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    // A normal load still queues, and is admitted when a permit frees.
    let normal = in_queue(&admission, NORMAL, None);
    tokio::time::sleep(Duration::from_millis(1)).await;
    drop(held);
    let admitted: Vec<bool> = futures_util::future::join_all(queued)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Each gives its permit back at once, so every queued load gets it in turn.
    assert_eq!(admitted, vec![true, true], "the queued loads are admitted");
    assert!(
        normal.await.unwrap(),
        "and so is the normal load that queued after the shed"
    );
    assert_eq!(
        admission.queued.load(Ordering::Relaxed),
        0,
        "nobody counted as queued"
    );
}

fn per_group(limit: usize, per_group: usize) -> Arc<Admission> {
    let shares = Shares {
        per_group: Some(per_group),
        ..Shares::default()
    };
    let timeout = Duration::from_millis(100);
    Arc::new(Admission::with_shares("db".into(), limit, timeout, shares))
}

#[tokio::test(start_paused = true)]
async fn a_group_holds_at_most_its_share_and_the_others_get_the_rest() {
    let admission = per_group(4, 2);
    let a1 = admission
        .enter(NORMAL, Some(1), None)
        .await
        .expect("group 1's first");
    let _a2 = admission
        .enter(NORMAL, Some(1), None)
        .await
        .expect("group 1's second");
    // Group 1 is at its share: its third load waits (and is shed at the queue timeout)
    // although two of the admission's permits are free.
    assert_eq!(
        admission.enter(NORMAL, Some(1), None).await.err(),
        Some(Shed::Queued)
    );
    assert_eq!(admission.permits.available_permits(), 2);
    // Another group, and a load with no group, still get in at once.
    let _b = admission
        .enter(NORMAL, Some(2), None)
        .await
        .expect("group 2");
    let none = admission.enter(NORMAL, None, None).await.expect("no group");
    assert_eq!(admission.permits.available_permits(), 0);
    drop(none);
    // Group 1's next load waits for one of its own permits, though one of the
    // admission's is free now (and it is not counted in the admission's queue).
    let waiting = in_queue(&admission, NORMAL, Some(1));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!waiting.is_finished(), "group 1 is at its share");
    assert_eq!(admission.queued.load(Ordering::Relaxed), 0);
    assert_eq!(admission.permits.available_permits(), 1);
    drop(a1);
    assert!(
        waiting.await.unwrap(),
        "admitted once one of group 1's frees"
    );
}

/// A load that holds its group's permit and waits for the admission's, then gives up
/// (its queue timeout, or its caller dropped it), or is shed early, leaves nothing.
#[tokio::test(start_paused = true)]
async fn a_grouped_load_that_gives_up_in_the_admissions_queue_holds_nothing() {
    let shares = Shares {
        per_group: Some(1),
        low_queue: Some(1),
        ..Shares::default()
    };
    let timeout = Duration::from_millis(100);
    let admission = Arc::new(Admission::with_shares("db".into(), 1, timeout, shares));
    let held = admission
        .enter(NORMAL, Some(1), None)
        .await
        .expect("the one permit");
    assert_eq!(
        admission.enter(NORMAL, Some(2), None).await.err(),
        Some(Shed::Queued)
    );
    assert_eq!(admission.groups(), 1, "group 2 is forgotten");
    let dropped = in_queue(&admission, NORMAL, Some(3));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        (admission.groups(), admission.queued.load(Ordering::Relaxed)),
        (2, 1)
    );
    // The queue is at low_queue: a low-priority load of group 4 is shed at once.
    assert_eq!(
        admission.enter(Priority::Low, Some(4), None).await.err(),
        Some(Shed::Early)
    );
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(
        (admission.groups(), admission.queued.load(Ordering::Relaxed)),
        (1, 0)
    );
    drop(held);
    assert_eq!(admission.groups(), 0);
    assert_eq!(admission.permits.available_permits(), 1);
}

/// Many loads of a few groups on several threads, admitted, timed out and dropped at
/// random: every group is forgotten at the end, and no group ever held more than its
/// share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn groups_left_by_many_threads_at_once_are_all_forgotten() {
    let admission = per_group(8, 2);
    let running: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
    let most = Arc::new(AtomicUsize::new(0));
    let loads: Vec<_> = (0..400u64)
        .map(|i| {
            let (admission, running, most) = (admission.clone(), running.clone(), most.clone());
            tokio::spawn(async move {
                let group = i % 4;
                /// Counts the group's running load out however it ends (an abort too),
                /// before its permit is given back.
                struct Running<'a>(&'a AtomicUsize);
                impl Drop for Running<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, Ordering::SeqCst);
                    }
                }
                if let Ok(_permit) = admission.enter(NORMAL, Some(group), None).await {
                    let counter = &running[group as usize];
                    let now = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    let _running = Running(counter);
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for (i, load) in loads.into_iter().enumerate() {
        if i % 7 == 0 {
            load.abort();
        }
        let _ = load.await;
    }
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "a group held more than its share"
    );
    assert_eq!(admission.groups(), 0);
    assert_eq!(admission.queued.load(Ordering::Relaxed), 0);
    assert_eq!(admission.permits.available_permits(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_group_is_forgotten_once_nothing_of_it_holds_or_waits() {
    let admission = per_group(2, 1);
    let held = admission
        .enter(NORMAL, Some(7), None)
        .await
        .expect("group 7");
    assert_eq!(admission.groups(), 1);
    // One waits in the group, then gives up; one is dropped while waiting.
    assert_eq!(
        admission.enter(NORMAL, Some(7), None).await.err(),
        Some(Shed::Queued)
    );
    let dropped = in_queue(&admission, NORMAL, Some(7));
    tokio::time::sleep(Duration::from_millis(10)).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    assert_eq!(admission.groups(), 1, "still held");
    drop(held);
    assert_eq!(admission.groups(), 0, "nothing of group 7 left");
    // A thousand groups one after another leave nothing behind either.
    for group in 0..1_000 {
        drop(
            admission
                .enter(NORMAL, Some(group), None)
                .await
                .expect("a free permit"),
        );
    }
    assert_eq!(admission.groups(), 0);
    assert_eq!(admission.permits.available_permits(), 2);
}
