//! Whether the notice subscription is up, for the tasks that wait for it to change: a
//! lease wait whose subscription dropped waits for it to come back, and the hearing
//! lease renews at once when it does.
//!
//! Not a `tokio::sync::watch` channel: a watch spreads its waiters over eight lists drawn
//! at random from the runtime's generator, so the order the waiters wake in (and so
//! which of two loads of one key calls the origin first) changed from one process to the
//! next, and a simulated seed did not replay bit for bit. `Notify` wakes its waiters in
//! the order they began to wait.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// The state, as the hub that changes it holds it.
#[derive(Debug, Default)]
pub(crate) struct Subscribed {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Changes so far × 2, plus 1 while up.
    state: AtomicU64,
    changed: Notify,
}

impl Shared {
    fn load(&self) -> u64 {
        self.state.load(Ordering::SeqCst)
    }
}

impl Subscribed {
    /// Whether the subscription is up.
    pub(crate) fn is_up(&self) -> bool {
        self.shared.load() & 1 == 1
    }

    /// Records `up`, waking every waiter if it changed; whether it did.
    pub(crate) fn set(&self, up: bool) -> bool {
        let state = self.shared.load();
        if (state & 1 == 1) == up {
            return false;
        }
        let changes = (state >> 1) + 1;
        let next = (changes << 1) | u64::from(up);
        self.shared.state.store(next, Ordering::SeqCst);
        self.shared.changed.notify_waiters();
        true
    }

    /// A view that waits for changes after now.
    pub(crate) fn watch(&self) -> SubscribedWatch {
        SubscribedWatch {
            seen: self.shared.load(),
            shared: self.shared.clone(),
        }
    }
}

/// One waiter's view of [`Subscribed`].
#[derive(Debug, Clone)]
pub(crate) struct SubscribedWatch {
    shared: Arc<Shared>,
    /// The state last seen.
    seen: u64,
}

impl SubscribedWatch {
    /// Until the state changes from the one last seen.
    pub(crate) async fn changed(&mut self) {
        self.until(|state, seen| state != seen).await;
    }

    /// Until the subscription is up (at once if it is).
    pub(crate) async fn up(&mut self) {
        self.until(|state, _| state & 1 == 1).await;
    }

    async fn until(&mut self, done: impl Fn(u64, u64) -> bool) {
        loop {
            let notified = self.shared.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the state is read: a change after the read wakes it.
            notified.as_mut().enable();
            let state = self.shared.load();
            if done(state, self.seen) {
                self.seen = state;
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_change_wakes_a_waiter_and_only_a_change_counts() {
        let subscribed = Subscribed::default();
        let mut watch = subscribed.watch();
        assert!(!subscribed.is_up());
        assert!(!subscribed.set(false), "no change");
        let waiting = tokio::spawn(async move {
            watch.changed().await;
            watch
        });
        tokio::task::yield_now().await;
        assert!(subscribed.set(true));
        let mut watch = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken within the deadline")
            .expect("the waiter did not panic");
        assert!(subscribed.is_up());
        // Down and up again while nobody waited: still a change since it was last seen.
        assert!(subscribed.set(false));
        assert!(subscribed.set(true));
        tokio::time::timeout(Duration::from_secs(5), watch.changed())
            .await
            .expect("a change missed while not waiting is seen");
        tokio::time::timeout(Duration::from_secs(5), watch.up())
            .await
            .expect("up at once");
        let mut still = subscribed.watch();
        let unchanged = tokio::time::timeout(Duration::from_millis(20), still.changed()).await;
        assert!(
            unchanged.is_err(),
            "nothing changed since the watch was made"
        );
    }

    #[tokio::test]
    async fn waiters_wake_in_the_order_they_began_to_wait() {
        let subscribed = Arc::new(Subscribed::default());
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let waiters: Vec<_> = (0..20)
            .map(|i| {
                let (mut watch, order) = (subscribed.watch(), order.clone());
                tokio::spawn(async move {
                    watch.up().await;
                    order.lock().unwrap().push(i);
                })
            })
            .collect();
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        subscribed.set(true);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("woken within the deadline")
                .expect("no panic");
        }
        assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());
    }
}
