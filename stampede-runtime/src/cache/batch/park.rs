//! How a key's load tells its batch's gather that it waits on something outside the
//! batch (it *parks*), or that it ended, so the gather knows when every key of a call is
//! accounted for.
use super::gather::{Ticket, PARKED, SETTLED};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// What a key's load tells its gather: it starts to wait on something else, or it ended.
pub(super) trait Park: Send + Sync {
    fn park(&self, ticket: &Ticket, to: u8);
}

thread_local! {
    /// The batch key whose load this thread is polling, if any.
    static POLLING: RefCell<Option<(Arc<dyn Park>, Ticket)>> = const { RefCell::new(None) };
}

/// A key's load, polled with its batch key known to the steps that wait (see
/// [`parked`]). Its end marks the key done; so does its drop unfinished (the call's caller
/// left, and the load goes on in a task where it is not heard): the gather must not wait
/// for what it can no longer hear from.
pub(super) struct Tracked<L> {
    pub(super) load: L,
    pub(super) key: (Arc<dyn Park>, Ticket),
    pub(super) done: bool,
}

impl<L: Future + Unpin> Future for Tracked<L> {
    type Output = L::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<L::Output> {
        let key = Some(self.key.clone());
        let outer = POLLING.with(|polling| polling.replace(key));
        let polled = Pin::new(&mut self.load).poll(cx);
        POLLING.with(|polling| polling.replace(outer));
        if polled.is_ready() {
            self.done = true;
            let (gather, ticket) = &self.key;
            gather.park(ticket, SETTLED);
        }
        polled
    }
}

impl<L> Drop for Tracked<L> {
    fn drop(&mut self) {
        if !self.done {
            let (gather, ticket) = &self.key;
            gather.park(ticket, PARKED);
        }
    }
}

/// A load is about to wait on something outside its batch: another load of its key (a
/// flight here, or another replica's lease), or an admission permit. Its batch stops
/// waiting for it before asking the origin for the keys handed over. Nothing outside a
/// batch key's poll.
pub(in crate::cache) fn parked() {
    let polling = POLLING.with(|polling| polling.borrow().clone());
    if let Some((gather, ticket)) = polling {
        gather.park(&ticket, PARKED);
    }
}
